"""Which device-specific choices xlpe makes, by device type, in one place (:func:`device_policy`).

xlpe's speed work was done on CPUs, and several of its choices only pay there; on a GPU PyTorch's own fused
kernels are the fast path. Every such choice reads a :class:`DevicePolicy`:

* the attention product in bf16/fp16 (:class:`xlpe.nn.attention.MultiheadAttention`): on CPU an explicit
  ``q·kᵀ``, softmax, ``·v``, several times faster there than SDPA's CPU kernel at NMT lengths
  (``benchmarks/bench_attention_kernels.py``); elsewhere ``scaled_dot_product_attention`` (fused kernels);
* dropout masks (:func:`xlpe.nn.attention.dropout`): on CPU from the 16-bit lanes of a counter-based hash, several
  times faster than ``F.dropout``'s Bernoulli sampler there; elsewhere ``F.dropout``;
* the C allocator (:func:`xlpe.runtime.retain_freed_memory`) and oneDNN's primitive caches
  (:func:`xlpe.runtime.limit_onednn_caches`): host-process settings for a process whose tensors live in host
  memory and whose bf16 products run through oneDNN, i.e. a CPU process;
* the decoder's output projection at inference in float32 (:class:`xlpe.nn.transformer.Decoder`): on CPU through
  oneDNN's linear kernel with the weight packed once (PyTorch's own ``torch.ops.mkldnn._linear_pointwise``, the
  kernel its compiler uses for frozen CPU models), several times faster there than ``x @ W.t()`` at the few rows
  of a beam step (``benchmarks/bench_output_projection.py``); elsewhere, or without oneDNN, the plain product;
* decoding with bf16 weights (:func:`xlpe.infer.translate.decoding_model`, :func:`packed_linear`): on CPU the model
  stays float32 and only its linear layers run as bf16 products, through oneDNN with the weights packed once,
  since the rest of a step (attention, norms, the cache, the log-softmax) is slower in bf16 there; elsewhere the
  model is cast to bf16;
* 16-bit linear layers at inference (:func:`bucketed_rows`): on CPU on their rows padded to a few counts, since
  oneDNN generates code for every new product shape and a beam step's rows change at almost every step; elsewhere
  the rows as they are;
* a decoder layer's float32 step at inference (:mod:`xlpe.nn.decoding_step`): on CPU in few operations, its
  attention as the explicit product, since SDPA's CPU kernel pays more per head and row block than one query row's
  products cost; elsewhere the layer's general path (SDPA's fused kernels);
* beam search's top-k (:func:`xlpe.infer.beam.chunked_topk`): on CPU through chunk maxima, several times faster
  there than ``topk`` over the vocabulary; elsewhere ``topk`` itself (fast on a GPU);
* the weight types decoding takes (:func:`xlpe.infer.translate.check_dtype`): ``int8`` (torch's dynamic
  quantisation, a CPU kernel) on CPU only, ``float16`` on CUDA only;
* mixed precision (:func:`xlpe.runtime.autocast_context`, the trainer's loss scaler): bf16 autocast everywhere,
  fp16 autocast only on CUDA, and with fp16 a ``torch.amp.GradScaler`` (fp16's narrow range would flush small
  gradients to zero).

The policy is a pure function of the device type (:func:`policy_for`); :func:`device_policy` caches it per
type, so the layers can ask on every call. It lives in ``xlpe.nn`` because the layers read it;
``xlpe.runtime`` applies its process-wide parts (the callers of those functions ask it first).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class DevicePolicy:
    """The device-specific choices for one device type (see the module docstring).

    Attributes:
        device_type: ``torch.device(...).type`` (``cpu``, ``cuda``, ``mps``, ...).
        explicit_low_precision_attention: bf16/fp16 attention as an explicit product instead of SDPA.
        fast_dropout_mask: dropout masks from :func:`xlpe.nn.attention.splitmix64` instead of ``F.dropout``.
        retain_freed_memory: keep freed memory in glibc's heap (:func:`xlpe.runtime.retain_freed_memory`).
        limit_onednn_caches: cap oneDNN's primitive caches (:func:`xlpe.runtime.limit_onednn_caches`).
        chunked_topk: beam search's top-k through chunk maxima (:func:`xlpe.infer.beam.chunked_topk`).
        packed_output_projection: the float32 output projection at inference through oneDNN with a packed weight.
        bf16_products: decoding with bf16 weights keeps the model in float32 and runs its linear layers as bf16
            products through oneDNN with packed weights (:func:`packed_linear`; a CPU whose oneDNN takes bf16);
            elsewhere the model is cast.
        bucketed_rows: at inference, 16-bit linear layers run on their rows padded to one of a few counts
            (:func:`bucketed_rows`): oneDNN builds a primitive for every new product shape.
        lean_decoding_step: a decoder layer's float32 step at inference in few operations, with the explicit
            attention product (:mod:`xlpe.nn.decoding_step`); elsewhere the layer's general path (SDPA).
        decoding_dtypes: the weight types decoding takes (``float32``, ``bfloat16``; ``int8`` on CPU, ``float16``
            on CUDA).
        amp_modes: the autocast precisions the device takes (``bf16``; ``fp16`` on CUDA).
        loss_scaling: the autocast precisions that train with a ``torch.amp.GradScaler``.
    """

    device_type: str
    explicit_low_precision_attention: bool
    fast_dropout_mask: bool
    retain_freed_memory: bool
    limit_onednn_caches: bool
    chunked_topk: bool
    packed_output_projection: bool
    bf16_products: bool
    bucketed_rows: bool
    lean_decoding_step: bool
    decoding_dtypes: tuple[str, ...]
    amp_modes: tuple[str, ...]
    loss_scaling: tuple[str, ...]

    def grad_scaler(self, amp: str) -> bool:
        """Whether training with autocast precision ``amp`` needs a ``torch.amp.GradScaler`` on this device."""
        return amp in self.loss_scaling


def policy_for(device_type: str) -> DevicePolicy:
    """The :class:`DevicePolicy` of devices of type ``device_type``: the CPU tricks on ``cpu``; PyTorch's fused
    kernels, and fp16 with loss scaling, on ``cuda``; PyTorch's defaults and bf16 autocast on any other type."""
    cpu = device_type == "cpu"
    cuda = device_type == "cuda"
    return DevicePolicy(device_type=device_type, explicit_low_precision_attention=cpu, fast_dropout_mask=cpu,
                        retain_freed_memory=cpu, limit_onednn_caches=cpu, chunked_topk=cpu,
                        packed_output_projection=cpu and onednn_linear_available(),
                        bf16_products=cpu and onednn_bf16_linear_available(), bucketed_rows=cpu,
                        lean_decoding_step=cpu,
                        decoding_dtypes=("float32", "bfloat16") + (("int8",) if cpu else ("float16",) if cuda else ()),
                        amp_modes=("bf16", "fp16") if cuda else ("bf16",), loss_scaling=("fp16",) if cuda else ())


def onednn_linear_available() -> bool:
    """Whether this PyTorch has oneDNN and its packed linear kernel (``torch.ops.mkldnn._linear_pointwise``)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_bf16_linear_available() -> bool:
    """Whether oneDNN's packed linear kernel takes bf16 on this CPU: PyTorch refuses it without AVX512 (BW, VL, DQ)
    or AVX-NE-CONVERT (``torch.ops.mkldnn._is_mkldnn_bf16_supported``)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return onednn_linear_available() and check is not None and bool(check())


_POLICIES: dict[str, DevicePolicy] = {}


def device_policy(device: torch.device | str) -> DevicePolicy:
    """The :class:`DevicePolicy` of ``device`` (a ``torch.device`` or a name such as ``cpu`` or ``cuda:1``)."""
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    policy = _POLICIES.get(kind)
    if policy is None:
        policy = _POLICIES[kind] = policy_for(kind)
    return policy


def row_bucket(n: int) -> int:
    """The row count :func:`bucketed_rows` pads ``n`` rows to: a power of two up to 64 (at least 8), above that the
    next multiple of 64. Beam search over batches of 64 sentences meets about a dozen such counts."""
    return max(8, 1 << (n - 1).bit_length()) if n <= 64 else -(-n // 64) * 64


def bucketed_rows(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``fn(x)`` for a row-wise ``fn`` (linear layers, a feed-forward sublayer); at inference in 16 bits on a
    device whose policy says so (CPU), on ``x``'s rows padded with zero rows to :func:`row_bucket`'s count, the
    padding cut off the result. oneDNN builds a primitive (milliseconds of code generation) for every product
    shape it has not cached, and a decoding step's row count is its count of live beams, new at almost every step
    (docs/results/speed.md, "Decoding on an AMX host"). Elsewhere ``fn(x)`` itself."""
    if torch.is_grad_enabled() or x.dtype not in (torch.bfloat16, torch.float16) \
            or not device_policy(x.device).bucketed_rows:
        return fn(x)
    rows = x.numel() // x.shape[-1]
    target = row_bucket(rows)
    if target == rows:
        return fn(x)
    flat = torch.cat((x.reshape(rows, x.shape[-1]), x.new_zeros(target - rows, x.shape[-1])))
    y = fn(flat)[:rows]
    return y.view(*x.shape[:-1], y.shape[-1])


_DERIVED_LOCK = threading.Lock()
_DERIVED: weakref.WeakKeyDictionary[nn.Module, dict[str, tuple[tuple, Any]]] = weakref.WeakKeyDictionary()


def derived(owner: nn.Module, name: str, params: Sequence[Tensor], build: Callable[[], Any]) -> Any:
    """What ``build()`` makes from the parameters ``params`` (a stack of weights, a copy packed for a library's
    kernel), kept for ``owner`` under ``name`` (outside the module: not a parameter, not in the state dict, not
    copied or pickled with it) and built again whenever one of the parameters is another tensor, storage or version
    (an in-place update such as an optimiser step or ``load_state_dict``), so it never goes stale. Not for
    inference tensors (they have no version); it builds outside inference mode (without autograd), so what it
    makes can be the parameter of another derived value. Safe for threads decoding with one model (they build it
    once)."""
    key = tuple((id(p), p.data_ptr(), p._version) for p in params)
    with _DERIVED_LOCK:
        kept = _DERIVED.setdefault(owner, {})
        if name not in kept or kept[name][0] != key:
            with torch.inference_mode(False), torch.no_grad():
                kept[name] = key, build()
        return kept[name][1]


#: the attribute that marks a module whose linear layers run as bf16 products (:func:`packed_linear`)
BF16_PRODUCTS = "bf16_products"


def bf16_products(owner: nn.Module, x: Tensor, weight: Tensor) -> bool:
    """Whether :func:`packed_linear` runs ``owner``'s product as bf16: ``owner`` is marked (:data:`BF16_PRODUCTS`,
    set by :func:`xlpe.infer.translate.decoding_model`), at inference (eval mode, no autograd), on float32 input
    and weight that are not inference tensors, on a device whose policy says so (a CPU whose oneDNN has a bf16
    linear kernel: :attr:`DevicePolicy.bf16_products`)."""
    return (owner.__dict__.get(BF16_PRODUCTS, False) and not owner.training and not torch.is_grad_enabled()
            and x.dtype == weight.dtype == torch.float32 and not weight.is_inference()
            and device_policy(x.device).bf16_products)


def packed_linear(owner: nn.Module, name: str, x: Tensor, weight: Tensor, bias: Tensor | None = None,
                  relu: bool = False) -> Tensor:
    """``F.linear(x, weight, bias)`` (then ReLU with ``relu``) for a linear layer of ``owner`` named ``name``,
    on :func:`bucketed_rows`. Where :func:`bf16_products` says so, as a bf16 product: ``x`` rounded to bf16, oneDNN's
    linear kernel (``torch.ops.mkldnn._linear_pointwise``, the kernel PyTorch's compiler uses for frozen CPU
    models; ReLU fused) with a bf16 copy of the weight packed once into the kernel's blocked layout (kept by
    :func:`derived`, packed again after any update), the output back in float32. Everything else of the model
    stays float32."""
    if not bf16_products(owner, x, weight):
        y = bucketed_rows(lambda t: F.linear(t, weight, bias), x)
        return torch.relu(y) if relu else y
    packed = derived(owner, name, (weight,),
                     lambda: torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16)))
    b16 = None if bias is None else derived(owner, name + ".bias", (bias,), lambda: bias.detach().bfloat16())

    def product(t: Tensor) -> Tensor:
        y = torch.ops.mkldnn._linear_pointwise(t.reshape(-1, t.shape[-1]), packed, b16, "relu" if relu else "none",
                                               [], "")
        return y.view(*t.shape[:-1], weight.shape[0])
    return bucketed_rows(product, x.to(torch.bfloat16)).float()
