"""The experiment engine: its cache convention (xlpe.keys: a stage's key derives from its declared inputs; a field
at its default stays out, so a new option never changes an old key), and a new recipe added in one place (a toy one,
two systems and one table, below). A new encoding with a new channel, added in one place: tests/test_channels.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from xlpe.cli import main
from xlpe.experiments.engine.cache import file_sig, run_stage
from xlpe.experiments.engine.recipe import RecipeConfig, RecipeExperiment
from xlpe.experiments.engine.runs import Corpus, Evaluation, RunKey, Shared, System, run_grid
from xlpe.experiments.recipes import RECIPES
from xlpe.experiments.recipes.systems import pe_list
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


# A toy recipe, added in one place (this module and one RECIPES entry): two systems, one table, over the engine.

@dataclasses.dataclass
class ToyExperiment(RecipeExperiment):
    systems: list[str] = dataclasses.field(default_factory=lambda: ["ape", "rpe"])


@dataclasses.dataclass
class ToyConfig(RecipeConfig):
    EXPERIMENT = ToyExperiment
    experiment: ToyExperiment = dataclasses.field(default_factory=ToyExperiment)


TABLES = ("bleu",)


def load_config(path, sets):
    return ToyConfig.load(path, sets)


def run_experiment(cfg: ToyConfig, out, only=None):
    out, _, data, spm = cfg.begin(out, only, TABLES)
    e, p = cfg.experiment, data["paths"]
    shared = Shared(model=cfg.model, train=cfg.train, evaluation=Evaluation(beam=e.beam, lenpen=e.lenpen),
                    corpus=Corpus(spm=spm, train_src=p["train_src"], train_tgt=p["train_tgt"],
                                  tests={"test": (p["test_src"], p["test_tgt"], {})}, tokenized_by_design=True))
    key = RunKey(model=cfg.model, train=cfg.train, beam=e.beam, lenpen=e.lenpen, spm=file_sig(spm),
                 tests=file_sig(p["test_src"], p["test_tgt"]))
    runs = run_grid(out / "runs", {n: System(pe=pe_list(n)) for n in e.systems}, e.seeds, shared, key)
    rows = [f"| {n} | {runs[f'{n}/seed{s}']['tests']['test']['bleu']:.2f} |" for n in e.systems for s in e.seeds]
    return cfg.finish(out, "| system | BLEU |\n|---|---|\n" + "\n".join(rows) + "\n", {"runs": runs})


TOY = """
[data]
builtin = "sov"
builtin_sizes = [200, 10, 10]
[experiment]
seeds = [1]
vocab_size = 300
beam = 1
[model]
preset = "tiny"
d_model = 16
n_heads = 2
d_ff = 32
enc_layers = 1
dec_layers = 1
[train]
max_updates = 2
max_tokens = 300
warmup = 1
"""


def test_a_toy_recipe_is_one_module_and_one_registry_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(RECIPES, "toy", (__name__, "a toy recipe: two systems, one table"))
    cfg = tmp_path / "toy.toml"
    cfg.write_text(TOY)
    out = tmp_path / "out"
    assert main(["experiment", "toy", "--config", str(cfg), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert report.startswith("| system | BLEU |") and "| ape |" in report and "| rpe |" in report
    runs = json.loads((out / "results.json").read_text())["results"]["runs"]
    assert runs["rpe/seed1"]["pe"] == ["ape", "rpe"] and runs["rpe/seed1"]["updates"] == 2
    marker = json.loads((out / "runs" / "rpe" / "seed1" / "done.json").read_text())
    assert marker["params"]["run"] == {"pe": ["ape", "rpe"]} and marker["params"]["gold"] is False
    # cached: a second invocation trains nothing and reports the same
    assert main(["experiment", "toy", "--config", str(cfg), "--out", str(out)]) == 0
    assert json.loads((out / "runs" / "rpe" / "seed1" / "done.json").read_text()) == marker
    assert (out / "report.md").read_text() == report
    # its config is checked at load like every recipe's
    from xlpe.errors import ConfigError
    with pytest.raises(ConfigError, match="bogus_key"):
        load_config(str(cfg), ["train.bogus_key=1"])
