"""A toy parallel corpus and subword model for the training / translation tests (not a test module).

Source sentences are random words ``w0..w29``; the target is the same sentence reversed with ``w`` -> ``v``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest


def write_toy_corpus(folder: Path, n: int = 120, seed: int = 0, max_words: int = 10) -> tuple[Path, Path]:
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = [f"w{rng.randint(0, 29)}" for _ in range(rng.randint(1, max_words))]
        src.append(" ".join(words))
        tgt.append(" ".join("v" + w[1:] for w in reversed(words)))
    folder.mkdir(parents=True, exist_ok=True)
    s, t = folder / "train.src", folder / "train.tgt"
    s.write_text("\n".join(src) + "\n", encoding="utf-8")
    t.write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return s, t


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    """``dict(src, tgt, dev_src, dev_tgt, spm)``: 120 training pairs, 12 dev pairs, a joint subword model."""
    from xlpe.data.subword import train_subwords

    d = tmp_path_factory.mktemp("toy")
    s, t = write_toy_corpus(d, 120, seed=0)
    ds, dt = write_toy_corpus(d / "dev", 12, seed=1)
    spm = d / "joint.model"
    train_subwords([s, t], spm, vocab_size=320)
    return {"src": s, "tgt": t, "dev_src": ds, "dev_tgt": dt, "spm": spm}


def tiny_model_config(**overrides):
    from xlpe.nn.transformer import TransformerConfig
    base = dict(d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.2, max_len=64)
    return TransformerConfig.from_preset("tiny", **{**base, **overrides})


def quick_train_config(out, **overrides):
    from xlpe.train import TrainConfig
    base = dict(out=str(out), resume="auto", max_tokens=160, warmup=4, lr=3e-3, log_every=2, save_every=0,
                validate_every=0, progress=False, threads=1, seed=3)
    return TrainConfig(**{**base, **overrides})


def trained_checkpoint(toy, out: Path) -> Path:
    """A tiny APE model trained for 2 updates on the toy corpus, in ``out``: its last checkpoint."""
    from xlpe.train import DataConfig, train
    res = train(tiny_model_config(), quick_train_config(out / "run", max_updates=2),
                DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"])))
    return res.last_checkpoint


def pe_config(pe, vocab: int = 20, **kw):
    """A ``tiny`` model config with encodings ``pe``, no dropout (deterministic comparisons)."""
    from xlpe.nn.transformer import TransformerConfig
    kw.setdefault("src_vocab_size", vocab)
    kw.setdefault("dropout", 0.0)
    return TransformerConfig.from_preset("tiny", pe=pe, **kw)


def random_batch(seed: int, vocab: int = 20, pad_second: bool = False):
    """``(src (2, 6) ending in EOS, tgt (2, 5))`` of random ids; ``pad_second`` pads the second source row."""
    import torch
    torch.manual_seed(seed)
    src = torch.randint(4, vocab, (2, 6))
    src[:, -1] = 3
    if pad_second:
        src[1, 4:] = 0
        src[1, 3] = 3
    return src, torch.randint(4, vocab, (2, 5))
