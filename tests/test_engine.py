"""The experiment engine's cache convention (xlpe.keys): a stage's key derives from its declared
inputs; a field at its default stays out, so a new option never changes an old key."""

from __future__ import annotations

import dataclasses
import json

import pytest

from xlpe.experiments.engine.cache import run_stage
from xlpe.keys import Inputs, digest, keyed


@dataclasses.dataclass(frozen=True)
class Toy(Inputs):
    files: list
    sentences: int = keyed("n")
    level: str = "word"
    options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ToyWithANewOption(Toy):
    smoothing: float = 0.0


def test_required_fields_always_enter_and_defaults_stay_out():
    t = Toy(files=[["a.txt", 3, "ab"]], sentences=0)
    assert t.key_material() == {"files": [["a.txt", 3, "ab"]], "n": 0}
    assert Toy(files=[], sentences=0, level="subword").key_material() == {"files": [], "n": 0, "level": "subword"}
    assert Toy(files=[], sentences=0, options={"k": 1}).key_material()["options"] == {"k": 1}
    assert t.key() == digest({"files": [["a.txt", 3, "ab"]], "n": 0})


def test_a_new_option_at_its_default_keeps_the_key():
    old = Toy(files=[], sentences=5)
    assert ToyWithANewOption(files=[], sentences=5).key() == old.key()
    assert ToyWithANewOption(files=[], sentences=5, smoothing=0.1).key() != old.key()


def test_nested_inputs_enter_by_their_own_material():
    @dataclasses.dataclass(frozen=True)
    class Outer(Inputs):
        inner: Toy
        seeds: tuple = (1,)

    o = Outer(inner=Toy(files=[], sentences=1, level="subword"))
    assert o.key_material() == {"inner": {"files": [], "n": 1, "level": "subword"}}
    assert Outer(inner=Toy(files=[], sentences=1), seeds=(1, 2)).key_material()["seeds"] == [1, 2]


def test_a_stage_runs_once_for_its_inputs_and_again_when_they_change(tmp_path):
    calls = []

    def fn(d):
        calls.append(d)
        return {"n": len(calls)}

    assert run_stage(tmp_path, "toy", Toy(files=[], sentences=1), fn)["n"] == 1
    assert run_stage(tmp_path, "toy", ToyWithANewOption(files=[], sentences=1), fn)["n"] == 1     # cached
    marker = json.loads((tmp_path / "toy" / "done.json").read_text())
    assert marker["params"] == {"files": [], "n": 1} and marker["key"] == Toy(files=[], sentences=1).key()
    assert run_stage(tmp_path, "toy", Toy(files=[], sentences=2), fn)["n"] == 2
    assert len(calls) == 2 and (tmp_path / f"toy.stale-{Toy(files=[], sentences=1).key()}").is_dir()


def test_inputs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Toy(files=[], sentences=1).sentences = 2
