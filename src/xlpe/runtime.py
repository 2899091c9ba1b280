"""The training runtime that every training loop shares (the NMT trainer, the Cross-Align trainer): the
device, DDP set-up, autocast, seeds and RNG states, a progress bar, the metrics log, where to resume from,
and the run record (command, configs, versions, host); and the process-wide settings that a CPU process takes
(the C allocator, oneDNN's caches) when the device's policy (:func:`device_policy`, :mod:`xlpe.nn.device`) says.

A loop owns its own code, as a torchtune recipe does, and calls these utilities::

    dist = init_distributed(cfg.device)
    device = resolve_device(cfg.device, dist)
    autocast = autocast_context(cfg.amp, device)
    ...
    log = MetricsLog(out / "train_log.csv", "csv", resume_step)
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import json
import logging
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.distributed as dist

from xlpe.config import check_workers
from xlpe.errors import ConfigError, XlpeError
from xlpe.io.atomic import atomic_write, blame
from xlpe.io.process import die_with_parent
from xlpe.nn.device import DevicePolicy, device_policy, policy_for  # noqa: F401  (the policy's API, re-exported)

log = logging.getLogger("xlpe.runtime")


# -- devices and processes ------------------------------------------------------------------------------

@dataclass
class Distributed:
    """This process's place in a ``torchrun`` job (rank 0 of 1 without one)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    def all_sum(self, x: int) -> int:
        """``x`` summed over every rank."""
        if not self.enabled:
            return x
        t = torch.tensor([x], dtype=torch.int64)
        dist.all_reduce(t)
        return int(t.item())

    def decide(self, flag: bool) -> bool:
        """Rank 0's decision, shared with every rank."""
        return bool(self.broadcast(flag))

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        """Tear down the process group if :func:`init_distributed` created it."""
        if self.initialized_here:
            dist.destroy_process_group()


def init_distributed(device: str = "auto") -> Distributed:
    """Join the ``torchrun`` process group (``WORLD_SIZE > 1``; gloo on CPU, nccl on GPU), or a 1-process job. A
    rank ends (SIGTERM) when its launcher dies, even by SIGKILL, rather than train on alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed()
    die_with_parent(parent=os.getppid())
    local = int(os.environ.get("LOCAL_RANK", "0"))
    here = False
    if not dist.is_initialized():
        cuda = torch.cuda.is_available() and device != "cpu"
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
        here = True
    return Distributed(dist.get_rank(), dist.get_world_size(), local, here)


def set_threads(n: int, flag: str = "--threads") -> None:
    """Use ``n`` torch CPU threads in this process (0: leave torch's default), after
    :func:`xlpe.config.check_workers` (a negative or absurd count is a :class:`ConfigError` naming ``flag``)."""
    if check_workers(n, flag, zero="torch's default"):
        torch.set_num_threads(n)


def resolve_device(device: str | torch.device, dist: Distributed | None = None) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda`` under DDP -> this rank's GPU; a CUDA device that
    does not exist is a :class:`ConfigError` (not an assertion deep inside torch)."""
    if isinstance(device, torch.device):
        device = str(device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and dist is not None and dist.enabled:
        return torch.device("cuda", dist.local_rank)
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ConfigError(f"device {device!r} is not a device name ({e}); use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asked for but no GPU is available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r} asked for but there are {torch.cuda.device_count()} GPU(s)")
    return dev


# -- memory ---------------------------------------------------------------------------------------------------

#: (limit, usage) files of this container's memory cgroup: v2, then v1
_CGROUP_MEMORY = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                  ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def available_memory() -> int | None:
    """Bytes this process can still take before the system swaps or its OOM killer strikes: the kernel's
    estimate (``MemAvailable`` of ``/proc/meminfo``, else the free pages), or less when a memory cgroup (a
    container's limit) leaves less room; None where neither can be read."""
    avail = None
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo", encoding="ascii") as f:
            avail = next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), None)
    if avail is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_path, usage_path in _CGROUP_MEMORY:
        with contextlib.suppress(OSError, ValueError):
            with open(limit_path, encoding="ascii") as f, open(usage_path, encoding="ascii") as g:
                limit, usage = f.read().strip(), int(g.read())
            if limit != "max" and int(limit) < 2 ** 60:
                room = max(0, int(limit) - usage)
                avail = room if avail is None else min(avail, room)
            break
    return avail


def check_memory(need: int, what: str, fix: str) -> None:
    """A :class:`ConfigError` when ``need`` bytes (an estimate of ``what``) do not fit in
    :func:`available_memory`, saying how to ask for less (``fix``); better at once than the kernel's OOM killer
    without a word hours later. Nothing when the available memory cannot be read."""
    avail = available_memory()
    if avail is not None and need > avail:
        raise ConfigError(f"{what} needs about {_bytes(need)} of memory, more than the {_bytes(avail)} available: "
                          f"{fix}")


def _bytes(n: int) -> str:
    """``n`` bytes in GiB, or MiB below one GiB."""
    return f"{n / 2 ** 30:.1f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


# -- the C allocator -----------------------------------------------------------------------------------------

#: glibc's ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: the user's own glibc settings, which :func:`retain_freed_memory` leaves alone
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
#: the trim threshold :func:`retain_freed_memory` sets (the largest C int: never trim)
_NEVER_TRIM = 2 ** 31 - 1


def retained_memory_env(mmap_threshold_mb: int = 32) -> dict[str, str]:
    """The environment variables (:data:`MALLOC_ENV`) that give another process what
    :func:`retain_freed_memory` sets in this one (the benchmarks give them to fairseq)."""
    return dict(zip(MALLOC_ENV, (str(mmap_threshold_mb << 20), str(_NEVER_TRIM))))


def retain_freed_memory(mmap_threshold_mb: int = 32) -> bool:
    """Make glibc keep freed memory for reuse instead of handing it back to the OS; returns whether it did.

    Decoding allocates and frees blocks of megabytes at every step (the ``(rows, V)`` logits and
    log-probabilities, the feed-forward activations), training at every update. With glibc's defaults such
    blocks come from fresh ``mmap`` pages, or the heap top is trimmed after they are freed, so every step pays
    page faults to zero new pages.
    This serves blocks below ``mmap_threshold_mb`` (glibc's maximum, 32 MiB, by default) from the heap and never
    trims it: the process's resident memory stays at its peak. Process-wide and for good (glibc's adaptive
    thresholds are off after it). Does nothing off glibc, or when ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` is set (the user's choice wins). ``xlpe translate`` and
    :func:`xlpe.train.train` call it; API users who decode in a long-lived process of their own call it if they
    want it. Measured in ``docs/results/speed.md``.
    """
    libc = _glibc()
    if libc is None or any(k in os.environ for k in MALLOC_ENV):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold_mb << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))


def release_freed_memory() -> bool:
    """Hand the memory glibc holds free back to the OS (``malloc_trim(0)``: the heap top and every free page
    inside the heap); returns whether it could (glibc only).

    Training batches differ in shape, so the blocks freed after one update rarely fit the next update's exactly
    and glibc's heap keeps fragments of free memory that count in the process's resident size. Called between
    updates (``TrainConfig.trim_memory_every``), it lowers the peak resident size to about one update's own
    peak, at the price of page faults on the pages the next update touches again (measured in
    ``docs/results/speed.md``)."""
    libc = _glibc()
    if libc is None:
        return False
    trim = libc.malloc_trim
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    trim(0)
    return True


def _glibc():
    """The C library of this process if it is glibc (whose ``mallopt``/``malloc_trim`` the functions above use),
    else None."""
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "malloc_trim"):   # musl and others
            return None
    except OSError:
        return None
    return libc


AMP_MODES = ("none", "bf16", "fp16")

#: implementations of torch's Adam / AdamW: ``fused`` (one kernel over all parameters), ``foreach`` (torch's
#: multi-tensor kernels) or ``for-loop`` (one parameter at a time: torch's default on CPU, and what xlpe used up to
#: 0.1.x). The same algorithm; only the floating-point rounding of the update differs.
ADAM_IMPLS = ("fused", "foreach", "for-loop")


def adam_kwargs(impl: str) -> dict[str, bool]:
    """The keyword arguments that select ``impl`` (:data:`ADAM_IMPLS`) in ``torch.optim.Adam`` / ``AdamW``."""
    if impl not in ADAM_IMPLS:
        raise ConfigError(f"adam must be one of {', '.join(ADAM_IMPLS)}, not {impl!r}")
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]


#: oneDNN's primitive cache and ideep's cache in front of it (PyTorch's bf16 CPU matrix products use both); each
#: is read from the environment once, when the process first builds a bf16 product
ONEDNN_CACHE_ENV = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def limit_onednn_caches(capacity: int = 64) -> bool:
    """Keep at most ``capacity`` primitives in each of the caches of :data:`ONEDNN_CACHE_ENV`; returns whether it
    set them.

    bf16 (and fp16) matrix products on CPU run through oneDNN, and both caches keep a primitive, with its own
    memory, for every shape they have seen, up to 1,024 each. Training batches differ in shape, and decoding meets
    new shapes at every step, so a bf16 run fills them with shapes long gone: hundreds of megabytes of peak RSS.
    64 entries keep bf16 training's peak RSS below fp32's at about the same speed; 16 saves more memory and costs
    speed (measured in ``docs/results/speed.md``). :func:`xlpe.train.train` and ``xlpe translate`` call it.
    Process-wide, through the environment: it only takes effect when no bf16 product has run in this process yet
    (oneDNN reads the variables once). Does nothing when the user has set either variable (their choice wins);
    ``capacity`` must be >= 1 (0 crashes ideep).
    """
    if capacity < 1:
        raise ConfigError(f"oneDNN cache capacity must be >= 1, not {capacity}")
    if any(k in os.environ for k in ONEDNN_CACHE_ENV):
        return False
    os.environ.update(dict.fromkeys(ONEDNN_CACHE_ENV, str(capacity)))
    return True


def native_bf16(device: torch.device | str) -> bool | None:
    """Whether ``device`` has bf16 arithmetic in hardware: a GPU by torch's own check, an x86-64 CPU by its
    AVX512-BF16 or AMX instructions (what oneDNN's bf16 matrix products use); ``None`` where torch cannot tell
    (other CPUs, other devices)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    checks = [c for c in checks if callable(c)]          # private helpers of torch.cpu: absent in some releases
    return any(c() for c in checks) if checks else None


_WARNED_BF16: set[str] = set()
#: what :func:`warn_if_emulated_bf16` tells a training run to set instead
AMP_FP32_FIX = "amp = 'none' (--amp none) trains in float32"


def warn_if_emulated_bf16(device: torch.device | str, fix: str) -> bool:
    """Log a warning (once per ``fix``) when bf16 was asked for on a device without bf16 hardware: there the
    products are emulated and run slower than float32, not faster. ``fix`` says what to set instead. Returns
    whether it warned."""
    if native_bf16(device) is not False:
        return False
    if fix not in _WARNED_BF16:
        _WARNED_BF16.add(fix)
        log.warning("bf16 on a %s without bf16 instructions (no AVX512-BF16 or AMX): torch emulates it, slower "
                    "than float32 on this machine; %s", torch.device(device).type, fix)
    return True


def autocast_context(amp: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of autocast contexts: ``none`` (a no-op) or a precision of the device's policy (``bf16`` on any
    device, ``fp16`` on CUDA; :class:`xlpe.nn.device.DevicePolicy`). ``bf16`` on a CPU without bf16 instructions
    works, but slowly: :func:`warn_if_emulated_bf16` says so."""
    if amp not in AMP_MODES:
        raise ConfigError(f"amp must be one of {', '.join(AMP_MODES)}, not {amp!r}")
    if amp == "none":
        return contextlib.nullcontext
    if amp not in device_policy(device).amp_modes:
        raise ConfigError(f"amp={amp!r} needs a CUDA GPU; on {device.type.upper()} use amp='bf16'")
    if amp == "bf16":
        warn_if_emulated_bf16(device, AMP_FP32_FIX)
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a ``DistributedDataParallel`` wrapper (or the module itself)."""
    return model.module if hasattr(model, "module") else model


# -- seeds and RNG states ---------------------------------------------------------------------------------

def seed_all(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict:
    """The states of Python's, NumPy's and torch's global generators (CUDA too when present)."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping) -> None:
    """Restore what :func:`get_rng_state` returned."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- resumption -------------------------------------------------------------------------------------------

def resume_path(resume: str | None, out: Path) -> Path | None:
    """The checkpoint a run continues from: ``auto`` (the newest readable one in ``out``, or none), ``none``
    (a fresh start, refused when ``out`` already holds checkpoints) or a path."""
    from xlpe.nn.checkpoint import latest_checkpoint, list_checkpoints

    if resume in ("none", "", None):
        if list_checkpoints(out):
            raise ConfigError(f"{out} already holds checkpoints of a run: continue it with resume='auto' "
                              "(--resume auto) or choose another output directory")
        return None
    if resume == "auto":
        p = latest_checkpoint(out)
        if p is None and list_checkpoints(out):
            raise XlpeError(f"{out}: no checkpoint there can be read (all are damaged); cannot resume")
        return p
    p = Path(resume)
    if not p.is_file():
        raise ConfigError(f"resume checkpoint {resume} not found")
    return p


# -- progress, logs and the run record ----------------------------------------------------------------------

def progress_bar(enabled: bool, total: int | None, initial: int = 0, unit: str = "upd", desc: str = "train"):
    """A tqdm bar, or None when ``enabled`` is false (e.g. not rank 0)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total or None, initial=initial, unit=unit, dynamic_ncols=True, desc=desc)


class MetricsLog:
    """Append-only CSV / JSON-lines log. On resumption, rows after the resumed step are dropped first."""

    def __init__(self, path: Path, fmt: str, resume_step: int | None):
        self.path, self.fmt = path, fmt
        self.header: list[str] | None = None
        if resume_step is None:
            path.unlink(missing_ok=True)
        elif path.exists():
            rows = self._read()
            kept = [r for r in rows if int(float(r.get("step", 0))) <= resume_step]
            self._rewrite(kept, self.header)

    def _read(self) -> list[dict]:
        with open(self.path, encoding="utf-8", newline="") as f:
            if self.fmt == "jsonl":
                return [json.loads(line) for line in f if line.strip()]
            r = csv.DictReader(f)
            self.header = list(r.fieldnames or [])
            return list(r)

    def _rewrite(self, rows: list[dict], header: list[str] | None) -> None:
        with atomic_write(self.path) as f:
            if self.fmt == "jsonl":
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            elif header:
                w = csv.DictWriter(f, header, restval="")
                w.writeheader()
                w.writerows(rows)

    def write(self, row: dict) -> None:
        """Append ``row`` (a new column rewrites the file with it); a write error names the log file."""
        try:
            self._append(row)
        except OSError as e:
            raise blame(e, self.path) from None

    def _append(self, row: dict) -> None:
        row = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}
        if self.fmt == "jsonl":
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            return
        if self.header is None and self.path.exists() and self.path.stat().st_size:
            self._read()
        if self.header is None or set(row) - set(self.header):
            old = self._read() if self.path.exists() and self.path.stat().st_size else []
            self.header = (self.header or []) + [k for k in row if k not in (self.header or [])]
            self._rewrite(old, self.header)
        with open(self.path, "a", encoding="utf-8", newline="") as f:
            csv.DictWriter(f, self.header, restval="").writerow(row)


def versions(*extra: str) -> dict[str, str]:
    """Versions of xlpe, Python, torch, numpy, sentencepiece, sacrebleu and any ``extra`` modules that import."""
    import xlpe
    out = {"xlpe": xlpe.__version__, "python": platform.python_version(), "torch": torch.__version__,
           "numpy": np.__version__}
    for mod in ("sentencepiece", "sacrebleu", *extra):
        with contextlib.suppress(Exception):
            out[mod] = __import__(mod).__version__
    return out


def host() -> dict[str, Any]:
    """The CPU (model name and torch's CPU capability, e.g. ``AMD EPYC (AVX2)``), its bf16 instructions
    (:func:`native_bf16`), cores and torch's threads: two hosts can train different models from one seed and config
    (their kernels round differently), so every run records its host."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    return {"cpu": f"{name} ({torch.backends.cpu.get_cpu_capability()})", "native_bf16": native_bf16("cpu"),
            "cores": os.cpu_count(), "threads": torch.get_num_threads()}


def write_run_info(out: Path, **sections: Any) -> None:
    """Append this run's record (command, ``sections`` such as the configs, versions, host, time) to
    ``out/run.json``, a list with one entry per start or resumption."""
    info = {"command": sys.argv, **sections, "versions": versions(), "host": host(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = out / "run.json"
    history = []
    if path.exists():
        with contextlib.suppress(Exception):
            old = json.loads(path.read_text(encoding="utf-8"))
            history = old if isinstance(old, list) else [old]
    with atomic_write(path) as f:
        json.dump(history + [info], f, indent=1, default=str)
