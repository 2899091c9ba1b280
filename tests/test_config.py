"""The one config mechanism (xlpe.config): dataclass fields -> options, TOML < --set < flags, clear errors."""

import argparse
from dataclasses import dataclass

import pytest

from xlpe.config import (add_config_arguments, add_dataclass_arguments, apply_sets, build, merge_sources, option,
                         parse_pairs, parse_value)
from xlpe.errors import ConfigError


@dataclass
class Toy:
    name: str = option("a", "a name")
    size: int = option(3, "a size")
    rate: float | None = option(None, "a rate")
    flag: bool = option(False, "a switch")
    pair: tuple[int, int] = option((1, 2), "two numbers")
    items: list[str] = option(help="some items", factory=list)
    weights: dict[str, float] = option(help="NAME=W", factory=dict)


def _parser():
    p = argparse.ArgumentParser()
    add_config_arguments(p, ("toy",))
    add_dataclass_arguments(p, Toy, prefix="toy.")
    return p


def _cfg(argv):
    return build(Toy, merge_sources(_parser().parse_args(argv), ("toy",))["toy"], "toy")


def test_defaults_toml_sets_and_flags_in_order_of_precedence(tmp_path):
    assert _cfg([]) == Toy()
    f = tmp_path / "c.toml"
    f.write_text('[toy]\nname = "file"\nsize = 5\nweights = {x = 1.0}\n')
    c = _cfg(["--config", str(f), "--set", "toy.size=7", "--weight", "y=2", "--flag", "--pair", "4", "5",
              "--items", "p", "q"])
    assert (c.name, c.size, c.flag, c.pair, c.items) == ("file", 7, True, (4, 5), ["p", "q"])
    assert c.weights == {"x": 1.0, "y": 2.0}                    # a flag's NAME=VALUE adds to the file's table
    assert _cfg(["--config", str(f), "--set", "toy.size=7", "--size", "9"]).size == 9
    assert _cfg(["--rate", "0.5"]).rate == 0.5


def test_errors_name_what_is_wrong(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[toy]\nsise = 5\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['sise'\].*valid: .*size"):
        _cfg(["--config", str(f)])
    f.write_text("[other]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table\(s\) \['other'\]"):
        _cfg(["--config", str(f)])
    f.write_text("[toy\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        _cfg(["--config", str(f)])
    with pytest.raises(ConfigError, match="not found"):
        _cfg(["--config", str(tmp_path / "missing.toml")])
    with pytest.raises(ConfigError, match="SECTION.KEY=VALUE"):
        apply_sets({}, ["size=3"])
    with pytest.raises(ConfigError, match="--channel expects NAME=VALUE"):
        parse_pairs(["xl"], "--channel")


def test_an_integer_set_over_a_float_is_a_float():
    """The recipes' cache keys hash option values: `--set train.ssa_epochs=3` over a config's `1.0` must key like a
    config that says `3.0` (otherwise one stage trains twice, once for 3 and once for 3.0)."""
    from xlpe.experiments.engine.cache import digest
    doc = {"train": {"epochs": 1.0, "steps": 10, "flag": 0.5, "grid": [0.0, 0.5]}}
    apply_sets(doc, ["train.epochs=3", "train.steps=20", "train.flag=true", "train.grid=[0, 1, 0.5]", "train.new=2"])
    assert doc["train"] == {"epochs": 3.0, "steps": 20, "flag": True, "grid": [0.0, 1.0, 0.5], "new": 2}
    assert isinstance(doc["train"]["epochs"], float) and isinstance(doc["train"]["steps"], int)
    assert digest(doc["train"]["epochs"]) == digest(3.0) != digest(3)


def test_values_parse_as_toml_or_stay_text():
    assert parse_value("3") == 3 and parse_value("[1, 2]") == [1, 2] and parse_value("true") is True
    assert parse_value("runs/x") == "runs/x"
    assert parse_pairs(["a=1", "b=c=d"], "--x") == {"a": "1", "b": "c=d"}
