"""BLEU and chrF through sacrebleu, with signatures, and paired bootstrap significance between systems.

Nothing is reimplemented: scores, signatures and the paired bootstrap resampling test are sacrebleu's
own (``sacrebleu.metrics.BLEU``/``CHRF`` and ``sacrebleu.significance.PairedTest``). Hypotheses and
references are detokenised text, one sentence per line. The default tokenizer ``13a`` needs no download
(the SPM-based tokenizers fetch a model and therefore fail offline).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Sequence

from xlpe.errors import ConfigError, FormatError
from xlpe.io.text import read_lines


@dataclass
class MetricScore:
    name: str
    score: float
    signature: str
    text: str                       # sacrebleu's formatted score line


@dataclass
class SystemComparison:
    system: str
    scores: dict[str, float]
    p_values: dict[str, float | None] = field(default_factory=dict)   # None for the baseline
    ci: dict[str, float] = field(default_factory=dict)                # 95% CI half-width from resampling


def _metric(name: str, tokenize: str, lowercase: bool):
    from sacrebleu.metrics import BLEU, CHRF
    if name == "bleu":
        return BLEU(tokenize=tokenize, lowercase=lowercase)
    if name == "chrf":
        return CHRF()
    if name == "chrf++":
        return CHRF(word_order=2)
    raise ConfigError(f"unknown metric {name!r} (expected bleu, chrf or chrf++)")


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    for k, r in enumerate(refs):
        if len(r) != len(hyps):
            raise FormatError(f"{len(hyps)} hypotheses but reference set {k + 1} has {len(r)} lines",
                              expected="one hypothesis per reference line")


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]] | Sequence[str], *,
                  metrics: Sequence[str] = ("bleu", "chrf"), tokenize: str = "13a",
                  lowercase: bool = False) -> dict[str, MetricScore]:
    """Corpus-level scores. ``refs`` is one list of lines, or several reference sets."""
    if refs and isinstance(refs[0], str):
        refs = [refs]                            # type: ignore[list-item]
    _check(hyps, refs)  # type: ignore[arg-type]
    out = {}
    for name in metrics:
        m = _metric(name, tokenize, lowercase)
        s = m.corpus_score(list(hyps), [list(r) for r in refs])
        out[name] = MetricScore(name, float(s.score), str(m.get_signature()), s.format())
    return out


def sentence_bleu(hyp: str, refs: Sequence[str], tokenize: str = "13a") -> float:
    from sacrebleu.metrics import BLEU
    return float(BLEU(tokenize=tokenize, effective_order=True).sentence_score(hyp, list(refs)).score)


def paired_bootstrap(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]] | Sequence[str], *,
                     metrics: Sequence[str] = ("bleu", "chrf"), n_samples: int = 1000, seed: int = 12345,
                     tokenize: str = "13a") -> tuple[list[SystemComparison], dict[str, str]]:
    """Paired bootstrap resampling (Koehn 2004) of every system against the first (the baseline).

    Returns one :class:`SystemComparison` per system and the metric signatures (which record the number
    of samples and the seed).
    """
    from sacrebleu.significance import PairedTest
    if refs and isinstance(refs[0], str):
        refs = [refs]                            # type: ignore[list-item]
    if len(systems) < 2:
        raise ConfigError("paired bootstrap needs a baseline and at least one other system")
    for name, h in systems:
        _check(h, refs)  # type: ignore[arg-type]
    refs = [list(r) for r in refs]
    # sacrebleu caches reference statistics when the metric is given the references
    ms = {name: type(_metric(name, tokenize, False))(**_metric_kwargs(name, tokenize), references=refs)
          for name in metrics}
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)      # sacrebleu reads its seed from here at construction
    try:
        test = PairedTest([(n, list(h)) for n, h in systems], ms, references=None, test_type="bs",
                          n_samples=n_samples)
        sigs, table = test()
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old
    names = table["System"]
    out = []
    keys = [k for k in table if k != "System"]
    for idx, name in enumerate(names):
        c = SystemComparison(name, {})
        for k in keys:
            r = table[k][idx]
            c.scores[k] = float(r.score)
            c.p_values[k] = None if r.p_value is None else float(r.p_value)
            c.ci[k] = float(r.ci) if r.ci is not None else float("nan")
        out.append(c)
    return out, {k: str(v) for k, v in sigs.items()}


def _metric_kwargs(name: str, tokenize: str) -> dict:
    if name == "bleu":
        return {"tokenize": tokenize}
    if name == "chrf++":
        return {"word_order": 2}
    return {}


def _read(path: str) -> list[str]:
    return [t for _, t in read_lines(path)]


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", nargs="+", help="reference file(s), detokenised, one sentence per line")
    p.add_argument("--hyp", nargs="+", help="system output file(s); with several, the first is the baseline "
                                            "of the paired bootstrap test")
    p.add_argument("--names", nargs="+", help="display names of the systems (default: file names)")
    p.add_argument("--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "chrf++"],
                   help="metrics to compute (default: bleu chrf)")
    p.add_argument("--tokenize", default="13a", help="sacrebleu BLEU tokenizer (default 13a; spm ones need a download)")
    p.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap samples (default 1000)")
    p.add_argument("--seed", type=int, default=12345, help="bootstrap seed (default 12345)")
    p.add_argument("--orders", help="order file (lader `order` lines) to score for reordering accuracy")
    p.add_argument("--order-ref", help="reference alignments (Pharaoh) whose lader ranks score --orders")
    p.add_argument("--order-ref-base", type=int, choices=(0, 1), default=0, help="index base of --order-ref")
    p.add_argument("--order-src", help="source text of --orders (for lengths and bracket handling)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def cli_main(args: argparse.Namespace) -> int:
    result: dict = {}
    if args.hyp:
        if not args.ref:
            raise ConfigError("--hyp needs --ref")
        refs = [_read(r) for r in args.ref]
        names = args.names or [os.path.basename(h) for h in args.hyp]
        if len(names) != len(args.hyp):
            raise ConfigError("--names must name every --hyp file")
        systems = [(n, _read(h)) for n, h in zip(names, args.hyp)]
        if len(systems) == 1:
            sc = corpus_scores(systems[0][1], refs, metrics=args.metrics, tokenize=args.tokenize)
            result["scores"] = {k: asdict(v) for k, v in sc.items()}
            if not args.json:
                for v in sc.values():
                    print(f"{v.text}\n  signature: {v.signature}")
        else:
            comps, sigs = paired_bootstrap(systems, refs, metrics=args.metrics, n_samples=args.bootstrap,
                                           seed=args.seed, tokenize=args.tokenize)
            result["systems"] = [asdict(c) for c in comps]
            result["signatures"] = sigs
            if not args.json:
                keys = list(comps[0].scores)
                print("system".ljust(24) + "".join(k.rjust(22) for k in keys))
                for c in comps:
                    cells = []
                    for k in keys:
                        p = c.p_values[k]
                        cells.append((f"{c.scores[k]:.2f} ±{c.ci[k]:.2f}" + ("" if p is None else f" p={p:.4f}")).rjust(22))
                    print(c.system.ljust(24) + "".join(cells))
                for k, s in sigs.items():
                    print(f"  {k}: {s}")
    if args.orders:
        from xlpe.evaluate.reorder_metrics import order_scores_files
        rs = order_scores_files(args.orders, args.order_ref, ref_base=args.order_ref_base, src=args.order_src)
        result["reordering"] = rs
        if not args.json:
            print("reordering: " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in rs.items()))
    if not args.hyp and not args.orders:
        raise ConfigError("nothing to evaluate: give --hyp/--ref and/or --orders/--order-ref")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
