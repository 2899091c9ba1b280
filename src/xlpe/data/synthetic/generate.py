"""Generating synthetic sentence pairs (streams per split, deduplicated across splits) and writing a pair's files:
text, gold alignments, trees (CoNLL-U), gold orders, README and config."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from xlpe.errors import ConfigError, XlpeError
from xlpe.io.alignments import Alignment, format_alignment
from xlpe.io.atomic import atomic_group, atomic_write, output_folder
from xlpe.io.conllu import DepTree, format_conllu
from xlpe.data.synthetic.config import (CLAUSE_MAIN, FILE_KINDS, MAX_ATTEMPTS, MAX_PAIRS, PROFILES, SPLIT_ORDER,
                                        SyntheticConfig, SyntheticPair)
from xlpe.data.synthetic.lexicon import Lexicon
from xlpe.data.synthetic.grammar import Grammar, TooLong

log = logging.getLogger("xlpe.data.synthetic")


# ------------------------------------------------------------------------------------------ generation
def gold_order(n: int, links, tgt_len: int | None = None) -> list[int]:
    """The gold order of a source sentence of ``n`` words from its alignment links ``(i, j)``.

    Aligned words sorted by minimum target index (ties in source order); unaligned words placed
    immediately before the nearest aligned word to their right, or right after the last aligned word
    when none follows (lader ``attach_null=right``). Works for any alignment, e.g. one read from a file.
    """
    inf = float("inf") if tgt_len is None else tgt_len
    mins = [inf] * n
    for i, j in links:
        if j < mins[i]:
            mins[i] = j
    return _order_from_mins(mins, inf)


def _order_from_mins(keys: list, inf) -> list[int]:
    """Sort source indices by ``keys`` (min target index; ``inf`` = unaligned), modifying ``keys``.

    An unaligned word takes the key of its anchor (the nearest aligned word to its right, else the last
    aligned word); a stable sort by key then puts it right before (after) its anchor, because no aligned
    word lies between a word and its anchor and ties keep source order.
    """
    n = len(keys)
    if inf in keys:
        nxt = inf
        for i in range(n - 1, -1, -1):
            if keys[i] == inf:
                keys[i] = nxt
            else:
                nxt = keys[i]
        if keys[-1] == inf:                  # trailing unaligned words: key of the last aligned word
            i = n - 1
            while i >= 0 and keys[i] == inf:
                i -= 1
            if i >= 0:
                v = keys[i]
                for k in range(i + 1, n):
                    keys[k] = v
    return sorted(range(n), key=keys.__getitem__)


def _split_seed(seed: int, split: str) -> str:
    return f"xlpe-synthetic:{seed}:{split}"


def _stream(config: SyntheticConfig, split: str, lex: Lexicon | None = None) -> Iterator[SyntheticPair]:
    """Endless stream of pairs for ``split`` (its own RNG derived from the seed and the split name)."""
    lex = lex or Lexicon(config)
    rng = random.Random(_split_seed(config.seed, split))
    g = Grammar(config, lex, rng)
    r = rng.random
    max_len = config.max_len
    drop, ins = config.drop_rate, config.insert_rate
    fillers = lex.fillers
    sov = config.profile == "sov"
    clause = g.clause
    while True:
        for _ in range(MAX_ATTEMPTS):
            g.count = 0
            try:
                S, T, _v = clause(0, CLAUSE_MAIN)
            except TooLong:
                continue
            words = [w[0] for w in S]
            rels = [w[2] for w in S]
            upos = [w[1] for w in S]
            # The noise-free target length of *every* profile must fit, so that the rejection, and with
            # it the random stream, does not depend on the profile: one seed gives the same source
            # sentences in every profile. sov adds a particle per argument NP and per NP-attached PP
            # and has no articles, relative pronouns or separate "will".
            npron = upos.count("PRON")
            d = (rels.count("nsubj") + rels.count("obj") + rels.count("iobj") + rels.count("nmod") - 2 * npron
                 - words.count("the") - words.count("a") - words.count("will"))
            t0 = len(T)
            if (t0 if sov else t0 + d) > max_len or ((t0 - d) if sov else t0) > max_len:
                continue
            if drop:
                T = [w for w in T if not (w[2] and r() < drop)]
            if ins:
                out = []
                for w in T[:-1]:
                    if r() < ins:
                        out.append((fillers[int(r() * 3)], (), True))
                    out.append(w)
                out.append(T[-1])
                T = out
                if len(T) > max_len:
                    continue
            break
        else:
            raise ConfigError(f"synthetic: no pair within max_len={max_len} in {MAX_ATTEMPTS} attempts; "
                              f"raise max_len or lower the rates / max_depth")
        n, m = len(S), len(T)
        for i, w in enumerate(S):
            w[4] = i
        heads = [0 if w[3] is None else w[3][4] + 1 for w in S]
        sure, poss = [], []
        sa, pa = sure.append, poss.append
        mins = [m] * n
        for j, rec in enumerate(T):
            for w, s in rec[1]:
                i = w[4]
                if s:
                    sa((i, j))
                else:
                    pa((i, j))
                if mins[i] == m:             # links arrive by increasing j: the first is the minimum
                    mins[i] = j
        yield SyntheticPair(words, [rec[0] for rec in T], Alignment(frozenset(sure), frozenset(poss)),
                            DepTree(words[:], heads, rels, upos), _order_from_mins(mins, m))


def generate(config: SyntheticConfig | None = None, n: int | None = None, *,
             split: str = "train") -> Iterator[SyntheticPair]:
    """Lazily generate ``n`` pairs (``None``: endless) of the pair ``config`` describes.

    The stream for ``split`` depends only on ``config`` (seed, lexicon seed and grammar options) and the
    split name; memory stays flat however many pairs are drawn. No deduplication (see :func:`synth`).
    """
    config = config or SyntheticConfig()
    if n is not None and (not isinstance(n, int) or n < 0):
        raise ConfigError(f"number of pairs must be a non-negative integer, not {n!r}")
    it = _stream(config, split)
    return it if n is None else islice(it, n)


def lexicon(config: SyntheticConfig | None = None) -> dict[str, Any]:
    """The bilingual lexicon as plain data (for inspection and docs): entries per class and the
    target function words."""
    lex = Lexicon(config or SyntheticConfig())
    return {
        "nouns": [{"src": list(s), "tgt": [list(o) for o in opts], "animate": a} for s, opts, a in lex.nouns],
        "verbs": [{"class": ("intransitive", "transitive", "ditransitive", "sentential")[c], "src": list(s),
                   "tgt": [list(o) for o in opts]} for c, s, opts in lex.verbs],
        "adjectives": [{"src": s, "tgt": [list(o) for o in opts]} for s, opts in lex.adjectives],
        "adverbs": [{"src": s, "tgt": [list(o) for o in opts]} for s, opts in lex.adverbs],
        "prepositions": [{"src": s, "tgt": list(o)} for s, o in lex.preps],
        "function_words": dict(lex.tfw),
    }


# ------------------------------------------------------------------------------------------ files
_README = """\
Synthetic parallel corpus generated by xlpe (xlpe.data.synthetic), profile {profile!r}.
{profile_doc}
Exact options: config.json ("config" loads with SyntheticConfig.from_dict or `xlpe synth --config`).

Files, one line (or CoNLL-U block) per sentence pair, line k of every file = the same pair:
  {{split}}.src     source sentence, tokens separated by single ASCII spaces
  {{split}}.tgt     target sentence, same tokenisation
  {{split}}.align   gold word alignment, Pharaoh format, 0-BASED indices (source-target):
                  "i-j" = sure link, "ipj" = possible link (sure links count as possible too).
                  Read with index base 0 (e.g. `xlpe aer --ref-base 0` / read_alignments(path, 0)).
  {{split}}.conllu  source dependency trees, CoNLL-U (word ids and HEAD 1-based, HEAD 0 = root = main verb)
  {{split}}.order   gold order, lader "order" format, 0-based: the j-th number is the source index of the
                  word at position j of the target-ordered source (reordered[j] = src[order[j]])
  config.json     generator options, sizes and line counts
  README.txt      this file

Gold order rule: aligned source words sorted by their minimum aligned target index (sure or possible
links), ties in source order; unaligned source words go immediately before the nearest aligned word to
their right (after the last aligned word when none follows), like lader attach_null=right.

Alignment conventions:
{particle}  - the second target word of a one-to-many translation has a {otm} link;
  - source articles are {articles}.

Splits: {splits}.
Each split is drawn from its own random stream (seed {seed} + split name).
{dedup_note}
Duplicates within a split are kept.
"""


def _readme(config: SyntheticConfig, counts: dict[str, int], dedup: bool) -> str:
    return _README.format(
        profile=config.profile, profile_doc=PROFILES[config.profile] + ".", seed=config.seed,
        particle=("" if config.profile != "sov" else
                  "  - case particles are extra target words, "
                  + ("possibly aligned ('ipj') to the head noun of their NP;\n" if config.particle_link == "possible"
                     else "left unaligned;\n")),
        otm=config.one_to_many_link,
        articles=("unaligned (the target has none)" if config.profile == "sov" else "aligned to target articles"),
        splits=", ".join(f"{k} {v} pairs" for k, v in counts.items()),
        dedup_note=("The splits are disjoint by source sentence: test first, dev without test sentences,\n"
                    "train without dev or test sentences." if dedup else
                    "Deduplication was OFF (--no-dedup): the splits may share sentences."))


def synth(out_dir: str | os.PathLike, config: SyntheticConfig | None = None,
          sizes: dict[str, int] | None = None, *, dedup: bool = True,
          progress: bool = False) -> dict[str, Path]:
    """Generate and write a corpus: for each split ``{split}.src/.tgt/.align/.conllu/.order``, plus
    ``config.json`` and ``README.txt`` in ``out_dir``. The files appear together, each complete, or none does
    (and a folder made for them is removed again).

    Args:
        sizes: pairs per split, default ``{"train": 10000, "dev": 500, "test": 500}``; any split names
            are allowed; splits of size 0 are not written; :data:`MAX_PAIRS` in all at most.
        dedup: make splits disjoint by source sentence (test, then dev, then train, then other names
            in alphabetical order, each avoids the sentences of those before it).
        progress: show a tqdm progress bar.

    Returns:
        ``{"train.src": Path, ..., "config.json": Path, "README.txt": Path}``.
    """
    config = config or SyntheticConfig()
    sizes = dict(sizes) if sizes is not None else {"train": 10000, "dev": 500, "test": 500}
    for k, v in sizes.items():
        if not isinstance(k, str) or not k or any(c in k for c in "/\\ ") or k.startswith("."):
            raise ConfigError(f"bad split name {k!r}")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"size of split {k!r} must be a non-negative integer, not {v!r}")
    if sum(sizes.values()) > MAX_PAIRS:
        raise ConfigError(f"synthetic: {sum(sizes.values())} pairs asked for; one run writes at most {MAX_PAIRS} "
                          "(about 5 GB); generate fewer")
    with output_folder(out_dir) as out, atomic_group():   # every file appears, or none and no new folder
        paths = _write_splits(out, config, sizes, dedup, progress)
    return paths


def _write_splits(out: Path, config: SyntheticConfig, sizes: dict[str, int], dedup: bool,
                  progress: bool) -> dict[str, Path]:
    lex = Lexicon(config)
    order = [s for s in SPLIT_ORDER if s in sizes] + sorted(s for s in sizes if s not in SPLIT_ORDER)
    seen: set[str] = set()
    paths: dict[str, Path] = {}
    counts: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for split in order:
        n = sizes[split]
        if n == 0:
            continue
        mine: set[str] = set()
        keep = dedup and split != order[-1]
        counts[split], skipped[split] = _write_split(out, split, n, config, lex, seen if dedup else None,
                                                     mine if keep else None, progress)
        seen |= mine
        for kind in FILE_KINDS:
            paths[f"{split}.{kind}"] = out / f"{split}.{kind}"
    written = {s: counts[s] for s in sizes if s in counts}
    meta = {"generator": "xlpe.data.synthetic", "xlpe_version": _version(), "config": config.to_dict(),
            "sizes": sizes, "written": written, "dedup": dedup, "skipped_duplicates": skipped,
            "index_base": {"align": 0, "order": 0, "conllu": "1 (CoNLL-U ids)"},
            "profile_description": PROFILES[config.profile]}
    with atomic_write(out / "config.json") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    with atomic_write(out / "README.txt") as f:
        f.write(_readme(config, written, dedup))
    paths["config.json"] = out / "config.json"
    paths["README.txt"] = out / "README.txt"
    return paths


def _version() -> str:
    try:
        from xlpe import __version__
        return __version__
    except Exception:  # pragma: no cover
        return "unknown"


def _write_split(out: Path, split: str, n: int, config: SyntheticConfig, lex: Lexicon,
                 exclude: set[str] | None, collect: set[str] | None, progress: bool) -> tuple[int, int]:
    stream = _stream(config, split, lex)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=n, desc=f"synth {split}", unit="pairs", file=sys.stderr)
    written = skipped = run = 0
    limit = max(100000, 20 * n)
    with ExitStack() as stack:
        fs = {k: stack.enter_context(atomic_write(out / f"{split}.{k}")) for k in FILE_KINDS}
        w_src, w_tgt, w_al, w_tr, w_or = (fs[k].write for k in FILE_KINDS)
        for p in stream:
            s = " ".join(p.src)
            if exclude is not None and s in exclude:
                skipped += 1
                run += 1
                if run > limit:
                    raise XlpeError(f"synthetic: split {split!r} keeps repeating sentences of earlier splits "
                                    f"({skipped} skipped); enlarge the vocabulary or pass dedup=False")
                continue
            run = 0
            if collect is not None:
                collect.add(s)
            w_src(s + "\n")
            w_tgt(" ".join(p.tgt) + "\n")
            w_al(format_alignment(p.alignment, 0) + "\n")
            w_tr(format_conllu(p.tree) + "\n\n")
            w_or(" ".join(map(str, p.order)) + "\n")
            written += 1
            if bar is not None:
                bar.update(1)
            if written == n:
                break
    if bar is not None:
        bar.close()
    if skipped:
        log.info("synth %s: skipped %d pairs whose source sentence is in an earlier split", split, skipped)
    return written, skipped
