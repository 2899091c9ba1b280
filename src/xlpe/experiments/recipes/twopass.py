"""The two-pass pipeline 2PT (Zheng et al. §3.1, Table 2; SPEC §6.5) as cached, resumable stages.

1. ``reordered`` (:func:`reordered_stage`): the oracle "En_reordered" text of a split from its word alignments,
   the source words sorted by their first aligned target index (stable; SPEC §6.2), unaligned words dropped
   (``unaligned='drop'``, the paper's example and script) or kept after their left neighbour (``'keep'``).
   Words are reordered whole and the subword model splits them afterwards `[I]`: the paper reorders BPE
   tokens, whose pieces a SentencePiece model cannot join back into words once they are moved apart.
2. ``2pt-reorderer`` (:func:`twopass_runs`): a small Transformer (``reorderer_layers`` encoder and decoder
   layers, 2 by default as the DPE repository's ``reordering_transformer_2_encoder_2_decoder``) trained
   source -> reordered source; its BLEU against the oracle reordered test source is Table 2's first number.
3. ``2pt``: a translator trained reordered source -> target. It translates (a) the reorderer's output of the
   same seed — the pipeline, from the source alone — and (b) the oracle reordered test source, an upper bound
   that needs the reference (its alignments come from the test pair).

Every run is one :func:`xlpe.experiments.engine.runs.run_grid` cell (``runs/<system>/seed<k>``), so an
interrupted pipeline resumes where it stopped; a translator is keyed on its reorderer's output file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import file_sig, run_stage
from xlpe.keys import Inputs
from xlpe.experiments.engine.runs import RunKey, Shared, System, run_grid
from xlpe.io.atomic import atomic_write

UNALIGNED = ("drop", "keep")


@dataclass(frozen=True)
class ReorderedInputs(Inputs):
    files: dict                            # split -> its source and word links, by content
    unaligned: str


@dataclass(frozen=True)
class FitInputs(Inputs):
    hyp: list                              # the reorderer's output and the subword model, by content
    limit: int                             # the translator's longest source


def reordered_stage(out: Path, splits: Mapping[str, tuple[str, str]], *, unaligned: str = "drop",
                    force: bool = False) -> dict[str, str]:
    """``reordered/<split>.src`` for each ``split -> (source text, 0-based Pharaoh word alignments)``; returns
    the paths. A sentence that loses every word (no link at all) keeps its first word, so no line is empty."""
    if unaligned not in UNALIGNED:
        raise ConfigError(f"unaligned must be one of {', '.join(UNALIGNED)}, not {unaligned!r}")
    params = ReorderedInputs(files={s: file_sig(*p) for s, p in splits.items()}, unaligned=unaligned)

    def fn(d: Path) -> dict:
        from xlpe.io import read_alignments, read_sentences
        from xlpe.reorder.targets import reordered_source
        res: dict[str, Any] = {"paths": {}, "dropped_words": {}}
        for split, (src, align) in splits.items():
            sents = list(read_sentences(src))
            als = list(read_alignments(align, 0, lengths=[(len(s), None) for s in sents], check_base=False))
            if len(als) != len(sents):
                raise ConfigError(f"{align} has {len(als)} lines for {len(sents)} source lines of {src}")
            dropped = 0
            with atomic_write(d / f"{split}.src") as f:
                for words, a in zip(sents, als):
                    r = reordered_source(words, sorted(a.links), unaligned=unaligned) or words[:1]
                    dropped += len(words) - len(r)
                    f.write(" ".join(r) + "\n")
            res["paths"][split] = str(d / f"{split}.src")
            res["dropped_words"][split] = dropped
        return res
    return run_stage(out, "reordered", params, fn, force)["paths"]


def twopass_runs(out: Path, seeds: list[int], shared: Shared, key: RunKey, *, reordered: Mapping[str, str],
                 test_src: str, test_tgt: str, reorderer_layers: int = 2, jobs: int = 1) -> dict[str, dict]:
    """The reorderer and translator runs of every seed (``2pt-reorderer/seed<k>``, ``2pt/seed<k>``).

    ``reordered`` holds the oracle reordered ``train`` and ``test`` sources (:func:`reordered_stage`); ``shared``
    is the recipe's grid, whose model, budget, subwords and decoding both runs take, on their own data (no dev set,
    no channels). The translator's tests are ``test`` (the reorderer's output -> the reference) and ``oracle`` (the
    oracle reordered test source -> the reference)."""
    if reorderer_layers < 1:
        raise ConfigError(f"reorderer_layers must be >= 1, not {reorderer_layers}")
    c = shared.corpus
    train_src, train_tgt = c.train_src, c.train_tgt

    def grid(src: str, tgt: str, tests: dict) -> Shared:
        return dataclasses.replace(shared, corpus=dataclasses.replace(
            c, train_src=src, train_tgt=tgt, dev_src=None, dev_tgt=None, train_channels={}, dev_channels={},
            tests=tests))
    reorderer = System(pe=["ape"], model={"enc_layers": reorderer_layers, "dec_layers": reorderer_layers})
    runs = run_grid(out, {"2pt-reorderer": reorderer}, seeds,
                    grid(train_src, reordered["train"], {"test": (test_src, reordered["test"], {})}),
                    dataclasses.replace(key, data=file_sig(train_src, reordered["train"], test_src,
                                                           reordered["test"])), jobs=jobs)
    for seed in seeds:                 # each translator reads the output of its own seed's reorderer
        hyp = _fit(out.parent, f"2pt-input-seed{seed}", runs[f"2pt-reorderer/seed{seed}"]["tests"]["test"]["hyp"],
                   c.spm, shared.model)
        runs.update(run_grid(
            out, {"2pt": System(pe=["ape"])}, [seed],
            grid(reordered["train"], train_tgt, {"test": (hyp, test_tgt, {}), "oracle": (reordered["test"], test_tgt,
                                                                                        {})}),
            dataclasses.replace(key, data=file_sig(reordered["train"], train_tgt, hyp, reordered["test"], test_tgt)),
            jobs=1))
    return runs


def _fit(out: Path, name: str, hyp: str, spm: str, model: dict) -> str:
    """The reorderer's output as the translator's input: a line longer than the translator's ``max_len`` (a
    degenerate, repeating output of an undertrained reorderer) is cut to fit, with a warning and a count, rather
    than stopping the pipeline."""
    from xlpe.nn.config import TransformerConfig
    m = dict(model)
    limit = TransformerConfig.from_preset(m.pop("preset", "small"), **m).max_len - 1      # room for EOS

    def fn(d: Path) -> dict:
        import logging

        from xlpe.data.subword import SubwordModel
        from xlpe.io.text import read_lines
        sw = SubwordModel.load(spm)
        cut = 0
        with atomic_write(d / "input.src") as f:
            for _, line in read_lines(hyp):
                words = line.split()
                enc = sw.encode(words)
                if len(enc.ids) > limit:
                    cut += 1
                    words = words[:enc.word_of[limit]] or [enc.pieces[0]]
                f.write(" ".join(words) + "\n")
        if cut:
            logging.getLogger("xlpe.experiments").warning("%s: %d reorderer outputs longer than %d subwords were cut "
                                                          "to fit the translator", hyp, cut, limit)
        return {"input": str(d / "input.src"), "cut_lines": cut, "limit": limit}
    return run_stage(out, name, FitInputs(hyp=file_sig(hyp, spm), limit=limit), fn)["input"]
