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


def _stop_signal_state() -> dict:
    """SIGINT's and SIGTERM's handlers (Python's view), the main thread's blocked mask, and the kernel's view of
    which signals are ignored (a C library can ignore a signal behind Python's back)."""
    import signal
    state = {"handlers": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
             "mask": signal.pthread_sigmask(signal.SIG_BLOCK, []) if hasattr(signal, "pthread_sigmask") else None}
    try:
        ignored = next(int(line.split()[1], 16) for line in open("/proc/self/status") if line.startswith("SigIgn"))
        state["ignored"] = {s for s in (signal.SIGINT, signal.SIGTERM) if ignored >> (s - 1) & 1}
    except (OSError, StopIteration):
        pass
    return state


def _sigint_as_in_a_terminal() -> None:
    """A shell starts a background job (``make test &``, ``nohup``) with SIGINT ignored, and every process the tests
    start would inherit that, so their Ctrl-C tests would see commands finish instead of stop. The tests run as
    from a terminal: SIGINT raises KeyboardInterrupt."""
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_sigint_as_in_a_terminal()
_SIGNALS_AT_START = _stop_signal_state()


def _restore_stop_signals(state: dict) -> None:
    import signal
    for s, handler in state["handlers"].items():
        signal.signal(s, handler)                 # sets the kernel's disposition too
    if state["mask"] is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, state["mask"])


@pytest.fixture(autouse=True)
def _signals_left_alone():
    """A test must leave the process's stop signals as the session found them: a SIGINT ignored or blocked here is
    inherited by every subprocess a later test starts, whose Ctrl-C test then sees the command finish instead of
    stop. Checked before each test (a changed state there comes from a fixture of its module, or the test before)
    and after it; a changed state is restored, and the test fails."""
    before = _stop_signal_state()
    if before != _SIGNALS_AT_START:
        _restore_stop_signals(_SIGNALS_AT_START)
        pytest.fail(f"stop signals changed before this test (a module fixture or the previous test): "
                    f"{before} instead of {_SIGNALS_AT_START} (restored now)")
    yield
    after = _stop_signal_state()
    if after != _SIGNALS_AT_START:
        _restore_stop_signals(_SIGNALS_AT_START)
        pytest.fail(f"the test left its stop signals changed: {after} instead of {_SIGNALS_AT_START} (restored now)")
