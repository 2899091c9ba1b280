"""Every table of every recipe's config is checked when the config is loaded: a misspelt key fails then, naming the
key, before any stage runs (the demo's options, and each `xlpe experiment` recipe's [data], [experiment], [model],
[train] and the tables nested in them)."""

from __future__ import annotations

import importlib

import pytest

from xlpe.cli.experiment import RECIPES
from xlpe.config import build
from xlpe.errors import ConfigError

BUILTIN = ["data.builtin='sov'"]
#: per recipe: the --set lines of a valid config, and the places a key can be misspelt (SECTION[.NESTED])
CASES = {
    "xl-pe": (BUILTIN, ["data", "experiment", "model", "train", "experiment.preorder", "experiment.pe_options"]),
    "structural-pe": (BUILTIN, ["data", "experiment", "model", "train", "experiment.preorder",
                                "experiment.pe_options"]),
    "dpe": (BUILTIN, ["data", "experiment", "model", "train", "experiment.preorder"]),
    "compare": (BUILTIN, ["data", "experiment", "model", "train", "experiment.preorder", "experiment.pe_options"]),
    "cross-align": (["data.pairs=['zhen']"], ["data", "experiment", "model", "train", "experiment.fig3_train"]),
}


def _load(recipe: str, sets: list[str]):
    return importlib.import_module(RECIPES[recipe][0]).load_config(None, sets)


def test_every_recipe_is_covered():
    assert set(CASES) == set(RECIPES)


@pytest.mark.parametrize("recipe", sorted(CASES))
def test_the_valid_base_configs_load(recipe):
    _load(recipe, CASES[recipe][0])


@pytest.mark.parametrize("recipe,where", [(r, w) for r, (_, places) in sorted(CASES.items()) for w in places])
def test_a_misspelt_key_fails_at_load_naming_it(recipe, where):
    base, _ = CASES[recipe]
    section, _, nested = where.partition(".")
    line = f"{section}.{nested}={{bogus_key=1}}" if nested else f"{section}.bogus_key=1"
    with pytest.raises(ConfigError, match="bogus_key"):
        _load(recipe, [*base, line])


def test_a_misspelt_demo_option_fails_naming_it():
    from xlpe.experiments.recipes.demo import DemoConfig
    with pytest.raises(ConfigError, match="bogus_key"):
        build(DemoConfig, {"bogus_key": 1}, "demo options")


@pytest.mark.parametrize("recipe", ["xl-pe", "structural-pe", "dpe"])
@pytest.mark.parametrize("line,what", [("model.d_model='wide'", "d_model must be an integer"),
                                       ("model.preset='huge'", "unknown preset"),
                                       ("train.lr=-1", "lr must be > 0"),
                                       ("train.seed=3", "set by the recipe")])
def test_bad_values_of_the_run_tables_fail_at_load(recipe, line, what):
    with pytest.raises(ConfigError, match=what):
        _load(recipe, [*CASES[recipe][0], line])
