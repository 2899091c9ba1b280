"""Cut a BERT-like directory's vocabulary (written by :func:`xlpe.align.e5_import.import_e5`) to the pieces of
given texts: :func:`prune_vocab`.

It keeps only the pieces that occur in the text files (plus the specials and e5's ``query: ``/``passage: ``
prefixes), writes the old -> new id mapping (``vocab_map.json``) and slices the word embeddings (and an MLM head
if the directory has one): the MLM softmax of Cross-Align training shrinks by the same factor (about 10x on a
language pair's text; ``benchmarks/bench_e5_import.py``). ``tests/test_e5_import.py`` checks the round trip.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from xlpe.align.e5_import import E5_PREFIXES, WEIGHTS, _dir_size, _import_hf
from xlpe.errors import ConfigError, FormatError
from xlpe.io.atomic import atomic_dir, check_dir_output

logger = logging.getLogger(__name__)

__all__ = ["VOCAB_MAP", "prune_vocab"]

VOCAB_MAP = "vocab_map.json"


def _iter_lines(paths: Iterable[str | os.PathLike]) -> Iterable[tuple[str, list[str]]]:
    for p in paths:
        p = os.fspath(p)
        try:
            with open(p, encoding="utf-8") as f:
                yield p, f.read().splitlines()
        except UnicodeDecodeError as e:
            raise FormatError(f"not UTF-8 text ({e.reason} at byte {e.start})", p) from None
        except OSError as e:
            raise ConfigError(f"cannot read text file {p}: {e.strerror or e}") from None


def prune_vocab(model_dir: str | os.PathLike, texts: Sequence[str | os.PathLike] | str | os.PathLike,
                out_dir: str | os.PathLike, *, keep_texts: Sequence[str] = E5_PREFIXES,
                batch_lines: int = 4096) -> dict:
    """Keep only the pieces that occur in ``texts`` (files, one sentence per line) and write a smaller copy.

    Kept: every special token, the pieces of the lines' tokenisation (a whole line and its space-separated words
    give the same pieces: the pre-tokeniser splits at spaces), the pieces of ``keep_texts`` (e5's prefixes by
    default) and the lowest-scoring piece of the full vocabulary — with it the pruned Unigram model has the same
    unknown-piece score, so the best segmentation of any kept text is the same as with the full vocabulary
    (checked on every line: ``mismatched_lines`` in the report). New ids follow the old order; ``vocab_map.json``
    holds ``new_to_old`` (list) and ``old_to_new`` (object). The word embeddings and, when present, an MLM
    head's decoder and bias are sliced; everything else is copied. Returns the size report (also logged).
    """
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    _import_hf()
    src = Path(model_dir)
    check_dir_output(out_dir, VOCAB_MAP, "a pruned model")
    texts = [texts] if isinstance(texts, (str, os.PathLike)) else list(texts)       # read twice
    tok_doc, cfg, w_path = _read_model_dir(src)
    n_old = len(tok_doc["model"]["vocab"])
    tok = Tokenizer.from_file(os.fspath(src / "tokenizer.json"))
    t0 = time.perf_counter()
    keep, encodings, n_lines, n_tokens = _kept_pieces(tok, tok_doc, texts, keep_texts, batch_lines)
    new_to_old = np.flatnonzero(keep)
    old_to_new = np.full(n_old, -1, dtype=np.int64)
    old_to_new[new_to_old] = np.arange(len(new_to_old))
    n_new = len(new_to_old)
    new_tok = Tokenizer.from_str(json.dumps(_renumbered_tokenizer(tok_doc, new_to_old, old_to_new)))
    mismatched = _mismatched_lines(new_tok, texts, encodings, new_to_old, batch_lines)
    if mismatched:         # cannot happen bar exact score ties (see the docstring)
        logger.warning("prune_vocab: %d of %d lines tokenise differently with the pruned vocabulary", mismatched,
                       n_lines)
    rows_old = int(cfg.get("vocab_size", n_old))
    tensors, sliced, meta = _sliced_weights(w_path, rows_old, new_to_old)
    cfg["vocab_size"] = n_new
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(key), int) and 0 <= cfg[key] < n_old:
            cfg[key] = int(old_to_new[cfg[key]])
    out = Path(out_dir)
    if out.resolve() == src.resolve():
        raise ConfigError(f"prune_vocab: the output directory {out} is the model directory itself")
    with atomic_dir(out, VOCAB_MAP, "a pruned model") as tmp:
        save_file(tensors, os.fspath(tmp / WEIGHTS), metadata={**meta, "format": "pt"})
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        new_tok.save(os.fspath(tmp / "tokenizer.json"))
        for p in src.iterdir():
            if p.is_file() and p.name not in {WEIGHTS, "config.json", "tokenizer.json", VOCAB_MAP}:
                shutil.copy2(p, tmp / p.name)
        doc = {"format": "xlpe-vocab-map", "version": 1, "source": os.path.abspath(src),
               "texts": [os.path.abspath(os.fspath(t)) for t in texts], "old_vocab_size": n_old,
               "old_embedding_rows": rows_old, "new_vocab_size": n_new,
               "new_to_old": new_to_old.tolist(),
               "old_to_new": {str(o): int(n) for n, o in enumerate(new_to_old.tolist())}}
        (tmp / VOCAB_MAP).write_text(json.dumps(doc) + "\n", encoding="utf-8")
    hidden = int(cfg.get("hidden_size", 0))
    report = {"lines": n_lines, "tokens": n_tokens, "old_vocab_size": n_old, "old_embedding_rows": rows_old,
              "new_vocab_size": n_new, "embedding_params_before": rows_old * hidden,
              "embedding_params_after": n_new * hidden,
              "mlm_softmax_reduction": round(rows_old / n_new, 2), "sliced_tensors": sliced,
              "mismatched_lines": mismatched, "seconds": round(time.perf_counter() - t0, 2),
              "bytes_before": _dir_size(src), "bytes_after": _dir_size(out)}
    logger.info("prune_vocab: %d -> %d pieces (%d embedding rows before; MLM softmax %.1fx smaller), %d lines",
                n_old, n_new, rows_old, rows_old / n_new, n_lines)
    return report


def _read_model_dir(src: Path) -> tuple[dict, dict, Path]:
    """``(tokenizer.json, config.json, weights path)`` of a directory written by ``import_e5``: single-file
    weights and a Unigram tokenizer."""
    tok_path, cfg_path, w_path = src / "tokenizer.json", src / "config.json", src / WEIGHTS
    for p in (tok_path, cfg_path, w_path):
        if not p.is_file():
            raise ConfigError(f"{src}: no {p.name}: expected a model directory written by import_e5 "
                              f"(single-file {WEIGHTS}, tokenizer.json)")
    try:
        tok_doc = json.loads(tok_path.read_text(encoding="utf-8"))
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise FormatError(f"invalid JSON ({e})", src) from None
    model = tok_doc.get("model", {})
    if model.get("type") != "Unigram":
        raise FormatError(f"tokenizer model is {model.get('type')!r}", tok_path, expected="a Unigram model")
    return tok_doc, cfg, w_path


def _kept_pieces(tok, tok_doc: dict, texts: list, keep_texts: Sequence[str],
                 batch_lines: int) -> tuple[np.ndarray, list[list[int]], int, int]:
    """``(keep, encodings, lines, tokens)``: which pieces of the vocabulary are kept (see :func:`prune_vocab`),
    and the ids of every line of ``texts``, their number and that of their pieces."""
    model = tok_doc["model"]
    vocab = model["vocab"]
    n_old = len(vocab)
    keep = np.zeros(n_old, dtype=bool)
    for a in tok_doc.get("added_tokens", []):
        if a.get("special") and a["id"] < n_old:
            keep[a["id"]] = True
    keep[model.get("unk_id", 0)] = True
    keep[int(np.argmin([s for _, s in vocab]))] = True      # same min score -> same unknown-piece score
    n_lines = n_tokens = 0
    encodings: list[list[int]] = []
    for _, lines in _iter_lines(texts):
        for i in range(0, len(lines), batch_lines):
            for enc in tok.encode_batch(lines[i:i + batch_lines], add_special_tokens=False):
                keep[enc.ids] = True
                encodings.append(enc.ids)
                n_tokens += len(enc.ids)
        n_lines += len(lines)
    for t in keep_texts:
        keep[tok.encode(t, add_special_tokens=False).ids] = True
    return keep, encodings, n_lines, n_tokens


def _renumbered_tokenizer(tok_doc: dict, new_to_old: np.ndarray, old_to_new: np.ndarray) -> dict:
    """The tokenizer document with the same pipeline on the kept pieces, ids renumbered."""
    vocab = tok_doc["model"]["vocab"]
    n_old = len(vocab)
    new_doc = json.loads(json.dumps(tok_doc))
    new_doc["model"]["vocab"] = [vocab[i] for i in new_to_old]
    if new_doc["model"].get("unk_id") is not None:
        new_doc["model"]["unk_id"] = int(old_to_new[new_doc["model"]["unk_id"]])
    for a in new_doc.get("added_tokens", []):
        if a["id"] < n_old:
            a["id"] = int(old_to_new[a["id"]])
    pp = new_doc.get("post_processor") or {}
    for proc in pp.get("processors", [pp]):
        for spec in (proc.get("special_tokens") or {}).values():
            spec["ids"] = [int(old_to_new[i]) for i in spec["ids"]]
        for key in ("sep", "cls"):                      # RobertaProcessing / BertProcessing layouts
            if isinstance(proc.get(key), list):
                proc[key][1] = int(old_to_new[proc[key][1]])
    return new_doc


def _mismatched_lines(new_tok, texts: list, encodings: list[list[int]], new_to_old: np.ndarray,
                      batch_lines: int) -> int:
    """The number of lines of ``texts`` that the pruned tokenizer segments otherwise than the full one did."""
    mismatched = 0
    if encodings:
        k = 0
        for _, lines in _iter_lines(texts):
            for i in range(0, len(lines), batch_lines):
                for enc in new_tok.encode_batch(lines[i:i + batch_lines], add_special_tokens=False):
                    if new_to_old[enc.ids].tolist() != encodings[k]:
                        mismatched += 1
                    k += 1
    return mismatched


def _sliced_weights(w_path: Path, rows_old: int, new_to_old: np.ndarray) -> tuple[dict, list[str], dict]:
    """``(tensors, sliced names, metadata)`` of the weights file: the word embeddings and any MLM head tensor of
    ``rows_old`` rows cut to the kept rows, everything else as it is."""
    from safetensors import safe_open
    idx = torch.from_numpy(new_to_old)
    sliced = []
    tensors = {}
    with safe_open(os.fspath(w_path), framework="pt") as f:
        meta = f.metadata() or {}
        for name in f.keys():
            t = f.get_tensor(name)
            if t.shape[:1] == (rows_old,) and (name.endswith("word_embeddings.weight") or "predictions" in name):
                t = t.index_select(0, idx).contiguous()
                sliced.append(name)
            tensors[name] = t
    if not any(s.endswith("word_embeddings.weight") for s in sliced):
        raise FormatError(f"no word embedding matrix with {rows_old} rows", w_path,
                          expected="embeddings.word_embeddings.weight of config.vocab_size rows")
    return tensors, sliced, meta
