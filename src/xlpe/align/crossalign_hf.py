"""The Hugging Face side of Cross-Align: the optional transformers import, BERT-like model directories and their
fast tokenizers, and loading or saving them without transformers' progress bars and load reports.

transformers (the ``xlpe[crossalign]`` extra) is imported only when a function here needs it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from xlpe.errors import ConfigError, FormatError

INSTALL_HINT = "pip install 'xlpe[crossalign]'"
#: model types whose checkpoints have BERT's layout (embeddings, post-LN layers, MLM head)
BERT_LIKE = ("bert",)


def import_transformers():
    """Import transformers lazily, with an install hint when it is missing."""
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"Cross-Align needs the optional package transformers: {INSTALL_HINT} "
                          f"[import failed: {e}]") from None
    return transformers


def read_hf_config(path: str) -> dict:
    """The ``config.json`` of the Hugging Face model directory ``path``, which must be a BERT-like model."""
    p = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise ConfigError(f"model directory {path} not found")
    if not p.is_file():
        raise ConfigError(f"{path}: no config.json: not a Hugging Face model directory")
    try:
        info = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as e:
        raise FormatError(f"invalid JSON ({e})", p) from None
    if info.get("model_type") not in BERT_LIKE:
        raise ConfigError(f"{p}: model_type {info.get('model_type')!r} is not BERT-like (expected one of "
                          f"{', '.join(BERT_LIKE)}; Cross-Align is built from BERT layers)")
    return info


def load_tokenizer(path: str):
    """The directory's fast tokenizer (word indices need one)."""
    tf = import_transformers()
    try:
        tok = tf.AutoTokenizer.from_pretrained(path)
    except Exception as e:       # transformers raises OSError, ValueError, KeyError... for a missing tokenizer
        raise ConfigError(f"{path}: no usable tokenizer ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]})") from None
    if not getattr(tok, "is_fast", False):
        raise ConfigError(f"{path}: the tokenizer is not a fast (tokenizers) one; word indices need it")
    return tok


@contextlib.contextmanager
def quiet_hf():
    """No progress bars or load reports from transformers while xlpe reads or writes a model."""
    from transformers.utils import logging as hf_logging
    on, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()            # xlpe reports a missing MLM head itself
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if on:
            hf_logging.enable_progress_bar()
