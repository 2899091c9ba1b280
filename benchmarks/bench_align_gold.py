"""AER of xlpe's eflomal aligner on real gold sets, against raw eflomal in the same run. Prints JSON.

Not a test. Protocol (per language pair):

* training text = the pair's unlabelled parallel corpus with the gold sentences appended, lowercased;
  the aligner runs once over all of it (no priors) and the last lines are scored;
* symmetrisation grow-diag-final-and (:mod:`xlpe.align.symmetrize`, Moses ``symal`` semantics);
* gold: ``../shared/data/word-alignment-gold/<pair>/<pair>.talp``, 1-based, sure ``i-j`` / possible ``ipj``;
  micro-averaged AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|) (:func:`xlpe.evaluate.aer.corpus_aer`).

Corpora: de-en Europarl ComTrans (23,580 lines); en-fr the first 100k lines of the ISI Hansards (untokenised,
no accents: tokenised and normalised below to the gold's conventions, accents stripped on both sides);
zh-en BTEC 44k; ja-en KFTT train 30k + dev (``tune`` left out: the gold set is drawn from it).

"raw eflomal" = ``eflomal.Aligner(n_samplers=3).align(...)`` on the same lowercased lines (its own reader:
splits on any whitespace, lowercases), symmetrised with the same function. Wall times: ``xlpe`` is the whole
``EflomalAligner.align_detailed`` call (indexing, eflomal, symmetrisation); ``raw`` is eflomal's ``align``
call and ``raw_sym`` the symmetrisation of its output.

Usage::

    python benchmarks/bench_align_gold.py --pairs deen --runs 3
    python benchmarks/bench_align_gold.py --pairs deen,enfr,zhen,jaen --runs 3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

from xlpe.align.eflomal import EflomalAligner, _eflomal_version
from xlpe.align.symmetrize import symmetrize
from xlpe.io.alignments import read_alignments
from xlpe.io.text import read_lines, tokenize

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
GOLD = DATA / "word-alignment-gold"
REFERENCE = {"deen": "26.6–26.8", "enfr": "9.0–9.1", "zhen": "32.5–33.6", "jaen": "53.2–53.9"}


def _lines(path, limit=None):
    out = []
    for _, text in read_lines(path):
        out.append(text)
        if limit is not None and len(out) >= limit:
            break
    return out


def _strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")


# --- Hansards normalisation to the NAACL-2003 gold conventions (lowercase, elisions and contractions
# expanded as in the gold: "de le" for "du", "je en" for "j'en"; hyphens and punctuation split) ---------------

_ABBREV = {"mr", "mrs", "ms", "dr", "st", "m", "mm", "mme", "hon", "no", "jr", "sr", "p", "c", "ltd", "inc"}
_FR_ELISION = {"l": "le", "d": "de", "j": "je", "n": "ne", "s": "se", "c": "ce", "m": "me", "t": "te",
               "qu": "que", "jusqu": "jusque", "lorsqu": "lorsque", "puisqu": "puisque", "quoiqu": "quoique"}
_FR_CONTRACTION = {"du": ["de", "le"], "des": ["de", "les"], "au": ["a", "le"], "aux": ["a", "les"]}
_PUNCT = re.compile(r"([,;:!?()\"«»\[\]{}/])")


def _split_tokens(text: str) -> list[str]:
    text = _PUNCT.sub(r" \1 ", text)
    text = re.sub(r"(?<=\w)-(?=\w)", " - ", text)
    toks = []
    for tok in tokenize(text):
        if tok.endswith(".") and len(tok) > 1 and tok[:-1].lower() not in _ABBREV and not re.fullmatch(r"(\w\.)+", tok):
            toks += [tok[:-1], "."]
        else:
            toks.append(tok)
    return toks


def norm_fr(line: str) -> str:
    out = []
    for tok in _split_tokens(_strip_accents(line.lower())):
        if tok == "aujourd'hui":
            out += ["aujourd'", "hui"]
            continue
        m = re.fullmatch(r"(\w+)'(\w.*)", tok)
        if m and m.group(1) in _FR_ELISION:
            out += [_FR_ELISION[m.group(1)], m.group(2)]
            continue
        out += _FR_CONTRACTION.get(tok, [tok])
    return " ".join(out)


def norm_en(line: str) -> str:
    out = []
    for tok in _split_tokens(line.lower()):
        m = re.fullmatch(r"(\w+)('s|n't|'re|'ve|'ll|'d|'m)", tok)
        out += [m.group(1), m.group(2)] if m else [tok]
    return " ".join(out)


def load_pair(pair: str):
    """(src_lines, tgt_lines, n_gold, gold_alignments), lowercased; the gold lines are the last n_gold."""
    if pair == "deen":
        d = DATA / "europarl-comtrans-de-en"
        src, tgt = _lines(d / "comtrans.de"), _lines(d / "comtrans.en")
        gs, gt = _lines(GOLD / "deen" / "deen.de"), _lines(GOLD / "deen" / "deen.en")
    elif pair == "enfr":
        d = DATA / "hansards-en-fr"
        src = [norm_en(x) for x in _lines(d / "train.en", 100_000)]
        tgt = [norm_fr(x) for x in _lines(d / "train.fr", 100_000)]
        gs = _lines(GOLD / "enfr" / "enfr.en")
        gt = [_strip_accents(x) for x in _lines(GOLD / "enfr" / "enfr.fr")]  # token count unchanged
    elif pair == "zhen":
        d = DATA / "btec-zh-en-44k"
        src, tgt = _lines(d / "train.zh"), _lines(d / "train.en")
        gs, gt = _lines(GOLD / "zhen" / "zhen.zh"), _lines(GOLD / "zhen" / "zhen.en")
    elif pair == "jaen":
        d = DATA / "kftt-ja-en-30k"
        src = _lines(d / "train.ja") + _lines(d / "dev.ja")
        tgt = _lines(d / "train.en") + _lines(d / "dev.en")
        gs, gt = _lines(GOLD / "jaen" / "jaen.ja"), _lines(GOLD / "jaen" / "jaen.en")
    else:
        raise SystemExit(f"unknown pair {pair!r}")
    keep = [k for k, (a, b) in enumerate(zip(src, tgt)) if tokenize(a) and tokenize(b)]
    src, tgt = [src[k] for k in keep], [tgt[k] for k in keep]
    lengths = [(len(tokenize(a)), len(tokenize(b))) for a, b in zip(gs, gt)]
    gold = list(read_alignments(GOLD / pair / f"{pair}.talp", 1, lengths=lengths))
    src = [" ".join(tokenize(x.lower())) for x in src + gs]
    tgt = [" ".join(tokenize(x.lower())) for x in tgt + gt]
    return src, tgt, len(gs), gold


def score(hyps, gold) -> dict:
    try:
        from xlpe.evaluate.aer import corpus_aer
        s = corpus_aer(hyps, gold)
        return {"aer": round(100 * s.aer, 2), "precision": round(100 * s.precision, 2),
                "recall": round(100 * s.recall, 2), "links": s.n_hyp}
    except ImportError:  # local fallback: same formula
        a = sum(len(h.links) for h in hyps)
        s = sum(len(g.sure) for g in gold)
        a_s = sum(len(h.links & g.sure) for h, g in zip(hyps, gold))
        a_p = sum(len(h.links & g.possible) for h, g in zip(hyps, gold))
        return {"aer": round(100 * (1 - (a_s + a_p) / (a + s)), 2), "precision": round(100 * a_p / a, 2),
                "recall": round(100 * a_s / s, 2), "links": a}


def run_xlpe(src, tgt, n_gold, n_samplers):
    al = EflomalAligner(sym="grow-diag-final-and", n_samplers=n_samplers, quiet=True)
    t0 = time.time()
    res = al.align_detailed([tokenize(x) for x in src], [tokenize(x) for x in tgt])
    return res.alignments[-n_gold:], {"seconds": round(time.time() - t0, 2)}


def run_raw(src, tgt, n_gold, n_samplers):
    import eflomal
    with tempfile.TemporaryDirectory(prefix="bench-raw-") as d:
        fwd, rev = os.path.join(d, "fwd"), os.path.join(d, "rev")
        t0 = time.time()
        eflomal.Aligner(n_samplers=n_samplers).align(src, tgt, links_filename_fwd=fwd, links_filename_rev=rev)
        t1 = time.time()
        parse = lambda line: [tuple(map(int, x.split("-"))) for x in line.split()]  # noqa: E731
        with open(fwd) as f, open(rev) as r:
            fl, rl = f.read().splitlines(), r.read().splitlines()
        hyps = [symmetrize(parse(a), parse(b), method="grow-diag-final-and") for a, b in zip(fl, rl)]
        t2 = time.time()
    return hyps[-n_gold:], {"seconds": round(t1 - t0, 2), "sym_seconds": round(t2 - t1, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="deen", help="comma-separated subset of deen,enfr,zhen,jaen")
    ap.add_argument("--runs", type=int, default=3, help="runs per aligner (eflomal cannot be seeded)")
    ap.add_argument("--n-samplers", type=int, default=3, help="eflomal samplers (default 3, as eflomal)")
    ap.add_argument("--only", choices=("both", "xlpe", "raw"), default="both")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    if not GOLD.is_dir():
        print(json.dumps({"skipped": f"data not found at {DATA.resolve()}"}))
        return 0
    report = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "eflomal": _eflomal_version(),
              "python": platform.python_version(), "cpus": os.cpu_count(), "pairs": {}}
    for pair in args.pairs.split(","):
        t0 = time.time()
        src, tgt, n_gold, gold = load_pair(pair)
        entry = {"train_lines": len(src), "gold_lines": n_gold, "load_seconds": round(time.time() - t0, 1),
                 "reference_raw_gdfa_aer": REFERENCE.get(pair)}
        for name, fn in (("xlpe", run_xlpe), ("raw_eflomal", run_raw)):
            if args.only not in ("both", name.split("_")[0]):
                continue
            runs = []
            for _ in range(args.runs):
                hyps, timing = fn(src, tgt, n_gold, args.n_samplers)
                runs.append({**score(hyps, gold), **timing})
                print(f"[{pair}] {name}: {runs[-1]}", file=sys.stderr, flush=True)
            aers = [r["aer"] for r in runs]
            entry[name] = {"aer_mean": round(statistics.mean(aers), 2), "aer_min": min(aers), "aer_max": max(aers),
                           "seconds_mean": round(statistics.mean(r["seconds"] for r in runs), 1), "runs": runs}
        report["pairs"][pair] = entry
    text = json.dumps(report, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
