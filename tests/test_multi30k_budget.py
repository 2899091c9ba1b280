"""``benchmarks/multi30k_budget.py``'s settings: a run folder's name carries exactly the options that differ from
the peer's recipe, including flags of the recipe that take two values (``--betas 0.9 0.98``)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "multi30k_budget.py"


def _script():
    spec = importlib.util.spec_from_file_location("multi30k_budget", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _args(**kw):
    return SimpleNamespace(**{"lr": None, "warmup": None, "max_tokens": None, "schedule": None, "dropout": None,
                              **kw})


def test_only_the_options_that_differ_from_the_recipe_are_named():
    m = _script()
    assert m.xlpe_optim(_args()) == {}
    assert m.xlpe_optim(_args(max_tokens=4096, lr=1e-3, warmup=400, schedule="inverse_sqrt", dropout=0.3)) == {}
    assert m.xlpe_optim(_args(max_tokens=8192)) == {"--max-tokens": "8192"}
    assert m.xlpe_optim(_args(lr=2e-3, schedule="linear", dropout=0.2)) == {
        "--lr": "0.002", "--schedule": "linear", "--dropout": "0.2"}
