"""Every recipe config in `examples/` loads and validates with its recipe (settings, `chosen_on` keys, data
paths), so a config that would fail hours into a queue of runs fails here instead."""

from pathlib import Path

import pytest

from xlpe.experiments.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "examples").glob("*.toml"))


def _recipe(path: Path) -> str:
    return next(mod for prefix, (mod, _) in sorted(RECIPES.items(), key=lambda kv: -len(kv[0]))
                if path.stem.startswith(prefix))


def test_every_example_belongs_to_a_recipe():
    assert CONFIGS and all(_recipe(p) for p in CONFIGS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_loads(path, monkeypatch, request):
    import importlib
    if "../shared/" in path.read_text():
        request.getfixturevalue("shared_data")  # skips, with the reason, when ../shared/data is absent
    monkeypatch.chdir(ROOT)                     # the configs' data paths are relative to the repository root
    cfg = importlib.import_module(_recipe(path)).load_config(str(path), [])
    assert cfg.experiment.seeds
