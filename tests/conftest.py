import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHARED_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The staged real data (read-only, never copied into the project)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the repository as ../shared/data)")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread, and 2 OpenMP threads stall badly on a busy 2-core machine.

    Only touches torch when a test module already imported it (tests of pure-Python parts stay torch-free).
    """
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _signals_left_alone():
    """A test must leave the process's stop signals as it found them: a SIGINT ignored or blocked here is inherited
    by every subprocess a later test starts, whose Ctrl-C test then sees the command finish instead of stop."""
    import signal
    stops = (signal.SIGINT, signal.SIGTERM)
    handlers = {s: signal.getsignal(s) for s in stops}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, []) if hasattr(signal, "pthread_sigmask") else None
    yield
    changed = [signal.Signals(s).name for s in stops if signal.getsignal(s) != handlers[s]]
    for s in stops:
        signal.signal(s, handlers[s])
    if mask is not None and signal.pthread_sigmask(signal.SIG_SETMASK, mask) != mask:
        changed.append("the blocked-signal mask")
    if changed:
        pytest.fail(f"the test left {', '.join(changed)} changed (restored now)")
