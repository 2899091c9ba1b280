"""Built-in synthetic language pairs: a seeded generator of parallel corpora with exact gold annotations.

The source language is English-like SVO; the target language has a configurable, systematically different
word order (a *profile*). Every pair comes with its gold word alignment (sure/possible), the source
dependency tree and the gold order (the permutation that puts the source into target order), so every
stage of xlpe (aligners, AER, preordering, structural and cross-lingual position encodings) can be run
and checked end to end without downloading anything. It is the default data set of ``xlpe demo`` and of
most tests.

Grammar (source side, English-like)
-----------------------------------
``S -> [ADV] NP_subj [AUX] V [NP_iobj] [NP_obj | that S] [PP] [ADV] .``

* NP: determiner (``the``, ``a``, ``this``), 0–2 adjectives, a noun (a few nouns are two-word compounds),
  optionally a PP and/or a relative clause (``who``/``that`` + VP, or ``that`` + NP V with an object gap).
* Verbs are intransitive, transitive, ditransitive (``V NP_iobj NP_obj``) or sentential (``V that S``).
* Tense: present ``V-s``, past ``V-ed``, future ``will V``, perfect ``has V-en``.
* Adverbs follow the VP, or (main clause only) open the sentence.
* Recursion (PPs, relative and complement clauses) is bounded by ``max_depth``. A pair is rejected and
  drawn again when its source, or the noise-free target of *any* profile, or its actual target has more
  than ``max_len`` tokens (an attempt stops as soon as the source is too long). The random draws do not
  depend on the profile, so without noise **one seed gives the same source sentences in every profile**:
  corpora of different profiles differ only in the target word order and function words, a controlled
  comparison. (Noise draws depend on the profile's function words, so with noise this no longer holds.)

Source content words and every target word are invented, pronounceable strings from a seeded lexicon
(``lexicon_seed``); source function words are English (``the a this who that will has`` and prepositions
``in on with near ...``), target function words are invented. The two vocabularies are disjoint except for
the sentence-final ``.``, which both languages share. Words are drawn uniformly from their class.

Target profiles (:data:`PROFILES`)
----------------------------------
``sov`` (default, Japanese-like)
    Head-final: subject first, then the strict mirror image of the English verb phrase
    (``ADV PP OBJ IOBJ V``), verb last with its auxiliary after it; postpositions instead of prepositions;
    relative clauses before the head noun, without relative pronoun; NP-attached PPs before the noun
    with the attributive particle; complement clauses before the verb, closed by the complementiser.
    Case particles follow argument NPs: topic (main-clause subject), subject (embedded-clause subject),
    object, indirect object. Articles ``the``/``a`` and relative pronouns have no translation
    (unaligned source words); ``this`` does. ``will V`` becomes one future verb form (many-to-one);
    ``has V-en`` becomes participle + auxiliary. Adjectives stay before the noun, in source order.
``v2`` (German-like)
    Main clauses are verb-second: the finite verb (or auxiliary) follows the first constituent, so a
    sentence-initial adverb inverts subject and verb; with an auxiliary the participle/infinitive goes
    to the end of the clause (separable aux/participle split). Relative and complement clauses are
    verb-final (non-finite verb, then finite auxiliary), with complement clauses extraposed to the end.
    Articles, relative pronouns and complementisers are translated; noun–adjective order is kept.
``svo-flip`` (French-like)
    Only the noun–adjective order changes: adjectives follow the noun, in mirror order
    (``the big red dog`` -> ``the dog red big``).
``identity``
    Same order, same structure, word-by-word translation: a control. Its gold order is *always* the
    identity (lexical one-to-many and many-to-one links are contiguous and monotone; ties keep source
    order, and unaligned source words, which only noise creates here, attach to the right).

Gold alignments
---------------
* Content words, prepositions, determiners that are translated, auxiliaries, relative pronouns,
  complementisers and punctuation: **sure** links.
* Case particles (and the attributive particle of NP-attached PPs) are extra target words:
  with ``particle_link="possible"`` (default) they get a **possible** link to the head noun of their NP
  (the attributive particle: to the preposition); with ``"none"`` they are unaligned.
* One-to-many (``one_to_many`` of the simple nouns and adjectives translate to two target words): the
  first word is sure, the second is sure or possible by ``one_to_many_link`` (default ``"sure"``).
  Many-to-one: two-word source noun compounds (``many_to_one`` of the nouns) translate to one target
  word, sure to both; in ``sov`` also ``will`` + verb -> one future verb form.
* Noise (all rates default 0) changes the target and keeps the alignment exact: ``drop_rate`` deletes
  target function words (articles, particles, pre/postpositions, relative pronouns, complementisers;
  their source words become unaligned), ``insert_rate`` inserts unaligned filler particles before any
  target word but the final ``.``, ``synonym_rate`` gives that fraction of content words 2–3
  target translations, one drawn at random per occurrence.

Gold trees (UD-style, 1-based heads, 0 = root)
----------------------------------------------
The main verb is the root (with an auxiliary, the participle/infinitive is the root and the auxiliary
depends on it, ``aux``). ``nsubj``/``obj``/``iobj``: argument head nouns -> verb; ``det``, ``amod``,
``compound`` -> noun; prepositions are case markers of their noun (``case``: preposition -> noun), and the
noun attaches to what the PP modifies (``obl`` -> verb, ``nmod`` -> noun); relative clause verb -> modified
noun (``acl:relcl``) and the relative pronoun -> that verb with the role it fills (``nsubj``/``obj``);
complement clause verb -> main verb (``ccomp``), ``that`` -> embedded verb (``mark``); adverbs -> their
verb (``advmod``); the final ``.`` -> root (``punct``).

Gold order
----------
``order[j]`` = the source index placed at reordered position ``j`` (lader ``order``; SPEC §4.1). It is
derived from the gold alignment, not from the grammar: aligned source words (sure *or* possible links)
are sorted by their minimum target index, ties (many-to-one) in source order (stable, as DPE, SPEC §6.2);
each unaligned source word is placed immediately before the nearest aligned word to its right (runs of
unaligned words keep their source order), and unaligned words after the last aligned word immediately
after it — lader's ``attach_null=right``. Hence ``apply_order(src, order)`` reads the aligned words in
non-decreasing minimum target index.

Splits and files
----------------
:func:`synth` writes ``{split}.src/.tgt/.align/.conllu/.order``, ``config.json`` and ``README.txt``.
Each split has its own random stream derived from ``seed`` and the split name, so a split does not
depend on the sizes of the others. Splits are made disjoint by deduplication on the source sentence:
test is generated first, dev skips sentences in test, train skips sentences in dev or test.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass, fields
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from xlpe.errors import ConfigError, XlpeError
from xlpe.io.alignments import Alignment, format_alignment
from xlpe.io.atomic import atomic_write
from xlpe.io.conllu import DepTree, format_conllu
from xlpe.io.orders import invert_order

log = logging.getLogger(__name__)

PROFILES: dict[str, str] = {
    "sov": "Japanese-like: SOV, head-final VP, postpositions, case particles, prenominal relative clauses, no articles",
    "v2": "German-like: verb-second main clauses, aux/participle split, verb-final relative and complement clauses",
    "svo-flip": "French-like: only noun-adjective order flips (adjectives after the noun)",
    "identity": "same order and structure, word-by-word translation (control)",
}

SPLIT_ORDER = ("test", "dev", "train")   # generation priority for deduplication
FILE_KINDS = ("src", "tgt", "align", "conllu", "order")
PUNCT = "."

# source function words (English); content words are invented
_SRC_PREPOSITIONS = ("in", "on", "with", "near", "under", "from", "behind", "for", "at", "over")
_SRC_FUNCTION = ("the", "a", "this", "who", "that", "will", "has", PUNCT) + _SRC_PREPOSITIONS

# fractions of the non-sentential verbs; sentential verbs are ~15% of all verbs (at least one)
_VERB_CLASS_FRACTIONS = (0.3, 0.5, 0.2)      # intransitive, transitive, ditransitive
_P_THIS, _P_THE = 0.15, 0.6                   # determiner: this 15%, the 45%, a 40%
_P_OBJ_REL = 0.4                              # share of object relatives among relative clauses

_MAIN, _RSUBJ, _ROBJ, _COMP = 0, 1, 2, 3      # clause kinds
_MAX_ATTEMPTS = 10000                         # rejection sampling guard (max_len)


# ------------------------------------------------------------------------------------------ config
@dataclass
class SyntheticConfig:
    """Options of the synthetic language pair. Defaults give a pair a small Transformer learns in minutes.

    Args:
        profile: target word order, one of :data:`PROFILES`.
        seed: seed of the sentence streams (each split derives its own stream from it).
        lexicon_seed: seed of the bilingual lexicon; ``None`` = ``seed``. Fix it to draw new sentences
            of the same language pair.
        nouns, verbs, adjectives, adverbs: lexicon sizes (source entries per class); ``verbs >= 4`` (one
            per class at least), ``adjectives``/``adverbs`` may be 0.
        prepositions: how many of the 10 English prepositions are used (0 disables PPs).
        max_len: maximum tokens on either side (longer pairs are drawn again; the target length checked
            is that of every profile, see the module docs).
        max_depth: bound on nesting (PPs, relative clauses, complement clauses).
        adj_rate: probability of a first adjective on a noun, and of a second one after it.
        pp_rate: probability that an NP, and separately a VP, takes a PP (within ``max_depth``).
        rel_rate: probability that an NP takes a relative clause (within ``max_depth``).
        comp_rate: probability that a clause's verb is sentential (``V that S``, within ``max_depth``).
        adv_rate: probability that a clause has an adverb.
        front_rate: probability that a main-clause adverb opens the sentence instead of ending the VP.
        aux_rate: probability of an auxiliary tense (future ``will V`` or perfect ``has V-en``, equally);
            otherwise present or past, equally.
        one_to_many: fraction of simple nouns and adjectives translated by two target words.
        one_to_many_link: link of the second target word, ``"sure"`` or ``"possible"``.
        many_to_one: fraction of the nouns that are two-word source compounds (of two simple nouns) with a
            one-word translation; capped so that the compounds are distinct (e.g. 2 of 4 nouns at most).
        particle_link: ``"possible"`` (case particles possibly aligned to their noun) or ``"none"``.
        synonym_rate: fraction of content words with 2–3 target translations (noise).
        drop_rate: probability of deleting each target function word (noise).
        insert_rate: probability of inserting an unaligned filler particle before each target word (noise).
    """

    profile: str = "sov"
    seed: int = 1
    lexicon_seed: int | None = None
    nouns: int = 40
    verbs: int = 24
    adjectives: int = 16
    adverbs: int = 8
    prepositions: int = 6
    max_len: int = 20
    max_depth: int = 2
    adj_rate: float = 0.35
    pp_rate: float = 0.2
    rel_rate: float = 0.12
    comp_rate: float = 0.08
    adv_rate: float = 0.2
    front_rate: float = 0.4
    aux_rate: float = 0.4
    one_to_many: float = 0.1
    one_to_many_link: str = "sure"
    many_to_one: float = 0.1
    particle_link: str = "possible"
    synonym_rate: float = 0.0
    drop_rate: float = 0.0
    insert_rate: float = 0.0

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first option that cannot work."""
        if self.profile not in PROFILES:
            raise ConfigError(f"unknown synthetic profile {self.profile!r}; choose one of {', '.join(PROFILES)}")
        for name in ("seed", "nouns", "verbs", "adjectives", "adverbs", "prepositions", "max_len", "max_depth"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"synthetic option {name} must be an integer, not {v!r}")
        ls = self.lexicon_seed
        if ls is not None and (not isinstance(ls, int) or isinstance(ls, bool)):
            raise ConfigError(f"synthetic option lexicon_seed must be an integer or None, not {self.lexicon_seed!r}")
        lower = {"nouns": 2, "verbs": 4, "adjectives": 0, "adverbs": 0, "prepositions": 0, "max_len": 6,
                 "max_depth": 0}
        for name, lo in lower.items():
            if getattr(self, name) < lo:
                raise ConfigError(f"synthetic option {name} must be >= {lo}, not {getattr(self, name)}")
        if self.prepositions > len(_SRC_PREPOSITIONS):
            raise ConfigError(f"synthetic option prepositions must be <= {len(_SRC_PREPOSITIONS)}, "
                              f"not {self.prepositions}")
        for f in fields(self):
            if f.type in ("float", float):
                v = getattr(self, f.name)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                    raise ConfigError(f"synthetic option {f.name} must be a number in [0, 1], not {v!r}")
        if self.one_to_many_link not in ("sure", "possible"):
            raise ConfigError(f"one_to_many_link must be 'sure' or 'possible', not {self.one_to_many_link!r}")
        if self.particle_link not in ("possible", "none"):
            raise ConfigError(f"particle_link must be 'possible' or 'none', not {self.particle_link!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SyntheticConfig":
        """Build from :meth:`to_dict` output; also accepts the ``config.json`` that :func:`synth` writes.
        Unknown keys are an error (an option silently ignored is worse than none)."""
        if not isinstance(d, dict):
            raise ConfigError(f"synthetic config must be a mapping, not {type(d).__name__}")
        if "generator" in d and isinstance(d.get("config"), dict):
            d = d["config"]
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown synthetic option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**d)


def load_config(path: str | os.PathLike) -> SyntheticConfig:
    """Read a :class:`SyntheticConfig` from JSON (a ``to_dict`` mapping or a ``config.json`` from :func:`synth`)."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{os.fspath(path)}: config file not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{os.fspath(path)}:{e.lineno}: invalid JSON ({e.msg})") from None
    return SyntheticConfig.from_dict(d)


# ------------------------------------------------------------------------------------------ output
@dataclass(slots=True)
class SyntheticPair:
    """One generated sentence pair with its gold annotations (all indices 0-based).

    Attributes:
        src: source tokens.
        tgt: target tokens.
        alignment: gold word alignment (sure ⊆ possible), links ``(source index, target index)``.
        tree: source dependency tree (``tree.words == src``; heads 1-based, 0 = root = the main verb).
        order: gold order, ``order[j]`` = source index at target-order position ``j`` (lader ``order``).
    """

    src: list[str]
    tgt: list[str]
    alignment: Alignment
    tree: DepTree
    order: list[int]

    @property
    def pos_xl(self) -> list[int]:
        """Each source token's position in the target-ordered sentence (``pos_XL[order[j]] = j``, SPEC §4.1)."""
        return invert_order(self.order)


# ------------------------------------------------------------------------------------------ lexicon
_SRC_ONSETS = ("b", "bl", "br", "d", "dr", "f", "fl", "fr", "g", "gl", "gr", "k", "kl", "kr", "l", "m", "n",
               "p", "pl", "pr", "s", "sk", "sl", "sn", "sp", "st", "t", "tr", "v", "w", "z")
_SRC_VOWELS = ("a", "e", "i", "o", "u", "a", "o", "i")
_SRC_CODAS = ("b", "d", "g", "k", "l", "m", "n", "p", "r", "t", "x", "nd", "nt", "rk", "sk", "st", "mp", "lf")
_TGT_CONS = ("k", "s", "t", "n", "h", "m", "y", "r", "w", "g", "z", "d", "b", "p", "sh", "ch")
_TGT_VOWELS = ("a", "i", "u", "e", "o")
# target verb suffixes: present, past, infinitive, participle, future (sov)
_TGT_VERB_SUFFIXES = ("mu", "ta", "ru", "te", "ro")


class _Lexicon:
    """The seeded bilingual lexicon. All forms on both sides are unique (the used-set is shared)."""

    def __init__(self, cfg: SyntheticConfig):
        seed = cfg.seed if cfg.lexicon_seed is None else cfg.lexicon_seed
        rng = random.Random(f"xlpe-synthetic-lexicon:{seed}")
        self._rng = rng
        self.used: set[str] = set(_SRC_FUNCTION)
        self._syn = cfg.synonym_rate
        self._otm = cfg.one_to_many

        # target function words: 1 syllable
        fw = {}
        for name in ("the", "a", "this", "who", "which", "that", "will", "has",
                     "topic", "subj", "obj", "iobj", "attr", "filler1", "filler2", "filler3"):
            fw[name] = self._fresh(lambda: self._tgt_word(1), 3)
        self.tfw = fw
        self.fillers = (fw["filler1"], fw["filler2"], fw["filler3"])
        # prepositions -> target adpositions (1-2 syllables)
        self.preps = [(p, (self._fresh(lambda: self._tgt_word(1 + (rng.random() < 0.5)), 1),))
                      for p in _SRC_PREPOSITIONS[:cfg.prepositions]]

        # nouns: simple ones, then compounds of two simple nouns with a one-word translation
        # (capped so that every compound is a distinct ordered pair of distinct simple nouns)
        n_comp = min(int(round(cfg.many_to_one * cfg.nouns)), cfg.nouns - 2)
        while n_comp > 0 and (cfg.nouns - n_comp) * (cfg.nouns - n_comp - 1) < n_comp:
            n_comp -= 1
        n_simple = cfg.nouns - n_comp
        simple = []
        for k in range(n_simple):
            src = self._fresh(lambda: self._src_word(1 + (rng.random() < 0.4)))
            simple.append(((src,), self._tgt_options(2 + (rng.random() < 0.4), self._otm), k % 2 == 0))
        nouns = list(simple)
        seen_pairs = set()
        for _ in range(n_comp):
            while True:
                a, b = int(rng.random() * n_simple), int(rng.random() * n_simple)
                if a != b and (a, b) not in seen_pairs:
                    break
            seen_pairs.add((a, b))
            nouns.append(((simple[a][0][0], simple[b][0][0]), self._tgt_options(3, 0.0), simple[b][2]))
        self.nouns = nouns   # (src forms (1 or 2), target options (tuples of 1 or 2 forms), animate)

        self.adjectives = [(self._fresh(lambda: self._src_word(1 + (rng.random() < 0.3)) + "y"),
                            self._tgt_options(2, self._otm)) for _ in range(cfg.adjectives)]
        self.adverbs = [(self._fresh(lambda: self._src_word(1 + (rng.random() < 0.3)) + "ly"),
                         self._tgt_options(2 + (rng.random() < 0.3), 0.0)) for _ in range(cfg.adverbs)]

        # verbs: sentential first (~15%, >= 1), the rest by _VERB_CLASS_FRACTIONS, each class >= 1
        n_sent = max(1, int(round(0.15 * cfg.verbs)))
        rest = cfg.verbs - n_sent
        n_intr = max(1, int(round(_VERB_CLASS_FRACTIONS[0] * rest)))
        n_ditr = max(1, int(round(_VERB_CLASS_FRACTIONS[2] * rest)))
        n_tr = rest - n_intr - n_ditr
        if n_tr < 1:
            n_tr, n_intr = 1, rest - 1 - n_ditr
        classes = [3] * n_sent + [0] * n_intr + [1] * n_tr + [2] * n_ditr
        self.verbs = []   # (class, (pres, past, base, part), target options of (pres, past, inf, part, fut))
        for c in classes:
            stem = self._fresh_verb_src()
            self.verbs.append((c, (stem + "s", stem + "ed", stem, stem + "en"), self._verb_options()))
        self.verbs_plain = [v for v in self.verbs if v[0] != 3]
        self.verbs_obj = [v for v in self.verbs if v[0] in (1, 2)]
        self.verbs_sent = [v for v in self.verbs if v[0] == 3]

    # --- word makers
    def _src_word(self, nsyl: int) -> str:
        r = self._rng.random
        parts = [_SRC_ONSETS[int(r() * len(_SRC_ONSETS))] + _SRC_VOWELS[int(r() * len(_SRC_VOWELS))]
                 for _ in range(nsyl)]
        parts.append(_SRC_CODAS[int(r() * len(_SRC_CODAS))])
        return "".join(parts)

    def _tgt_word(self, nsyl: int) -> str:
        r = self._rng.random
        return "".join(_TGT_CONS[int(r() * len(_TGT_CONS))] + _TGT_VOWELS[int(r() * len(_TGT_VOWELS))]
                       for _ in range(nsyl))

    def _fresh(self, make, grow_after: int = 30) -> str:
        """A new form from ``make`` not used anywhere yet; after many collisions add a syllable's worth."""
        for attempt in range(1000):
            w = make()
            if attempt >= grow_after:
                w = w + self._tgt_word(1 + attempt // (grow_after * 3))
            if w not in self.used:
                self.used.add(w)
                return w
        raise XlpeError("synthetic lexicon: could not invent enough distinct words")  # pragma: no cover

    def _fresh_verb_src(self) -> str:
        r = self._rng.random
        for attempt in range(1000):
            stem = self._src_word(1 + (r() < 0.4) + attempt // 50)
            forms = (stem, stem + "s", stem + "ed", stem + "en")
            if not any(f in self.used for f in forms):
                self.used.update(forms)
                return stem
        raise XlpeError("synthetic lexicon: could not invent enough distinct verbs")  # pragma: no cover

    def _verb_options(self) -> tuple:
        r = self._rng.random
        k = 1 if r() >= self._syn else 2 + (r() < 0.5)
        opts = []
        for _ in range(k):
            for attempt in range(1000):
                stem = self._tgt_word(2 + attempt // 50)
                forms = tuple(stem + s for s in _TGT_VERB_SUFFIXES)
                if not any(f in self.used for f in forms):
                    self.used.update(forms)
                    opts.append(forms)
                    break
            else:  # pragma: no cover
                raise XlpeError("synthetic lexicon: could not invent enough distinct verbs")
        return tuple(opts)

    def _tgt_options(self, nsyl: int, otm: float) -> tuple:
        """1 translation, or 2–3 synonyms (``synonym_rate``); each one or two words (``one_to_many``)."""
        r = self._rng.random
        two = r() < otm
        k = 1 if r() >= self._syn else 2 + (r() < 0.5)
        opts = []
        for _ in range(k):
            if two:
                opts.append((self._fresh(lambda: self._tgt_word(2)), self._fresh(lambda: self._tgt_word(2))))
            else:
                opts.append((self._fresh(lambda: self._tgt_word(nsyl)),))
        return tuple(opts)

    def vocabularies(self) -> tuple[set[str], set[str]]:
        """(source vocabulary, target vocabulary) that the generator can produce."""
        src = set(_SRC_FUNCTION[:8]) | {p for p, _ in self.preps}
        tgt = set(self.tfw.values()) | {PUNCT} | {w for _, o in self.preps for w in o}
        for s, opts, _ in self.nouns:
            src.update(s)
            tgt.update(w for o in opts for w in o)
        for s, opts in self.adjectives + self.adverbs:
            src.add(s)
            tgt.update(w for o in opts for w in o)
        for _, s, opts in self.verbs:
            src.update(s)
            tgt.update(w for o in opts for w in o)
        return src, tgt


# ------------------------------------------------------------------------------------------ grammar
# A source word is a list [form, upos, deprel, head word (list) or None, index]; a target word is a tuple
# (form, links, droppable) with links a tuple of (source word, is_sure). Both sequences are built
# bottom-up by the same recursive functions, the target in the profile's order.

class _TooLong(Exception):
    """Raised inside the grammar as soon as a sentence exceeds max_len source words (cheap rejection)."""


class _Grammar:
    def __init__(self, cfg: SyntheticConfig, lex: _Lexicon, rng: random.Random):
        self.cfg, self.lex = cfg, lex
        self.count, self.limit = 0, cfg.max_len     # source words so far in the current attempt
        self.r = rng.random
        self.sov = cfg.profile == "sov"
        self.v2 = cfg.profile == "v2"
        self.flip = cfg.profile == "svo-flip"
        self.max_depth = cfg.max_depth
        self.otm_sure = cfg.one_to_many_link == "sure"
        self.plink = cfg.particle_link == "possible"
        f = lex.tfw
        self.t = f
        self.nn, self.nadj = len(lex.nouns), len(lex.adjectives)
        self.nadv, self.nprep = len(lex.adverbs), len(lex.preps)
        self.adj_rate, self.pp_rate, self.rel_rate = cfg.adj_rate, cfg.pp_rate, cfg.rel_rate
        self.comp_rate, self.adv_rate, self.front_rate, self.aux_rate = (cfg.comp_rate, cfg.adv_rate,
                                                                         cfg.front_rate, cfg.aux_rate)

    def _particle(self, form: str, owner: list) -> tuple:
        return (form, ((owner, False),) if self.plink else (), True)

    def np(self, depth: int):
        """Returns (source words, target words, head noun, animate)."""
        r = self.r
        lex = self.lex
        srcf, opts, animate = lex.nouns[int(r() * self.nn)]
        tgt = opts[0] if len(opts) == 1 else opts[int(r() * len(opts))]
        if len(srcf) == 1:
            head = [srcf[0], "NOUN", "", None, 0]
            S = [head]
            if len(tgt) == 1:
                NT = [(tgt[0], ((head, True),), False)]
            else:
                NT = [(tgt[0], ((head, True),), False), (tgt[1], ((head, self.otm_sure),), False)]
        else:
            head = [srcf[1], "NOUN", "", None, 0]
            S = [[srcf[0], "NOUN", "compound", head, 0], head]
            NT = [(tgt[0], ((S[0], True), (head, True)), False)]
        # adjectives (0-2, distinct)
        if self.nadj and r() < self.adj_rate:
            na = self.nadj
            a1 = int(r() * na)
            if na > 1 and r() < self.adj_rate:
                a2 = (a1 + 1 + int(r() * (na - 1))) % na
                adjs = (lex.adjectives[a1], lex.adjectives[a2])
            else:
                adjs = (lex.adjectives[a1],)
            AS, AT = [], []
            for form, aopts in adjs:
                leaf = [form, "ADJ", "amod", head, 0]
                AS.append(leaf)
                at = aopts[0] if len(aopts) == 1 else aopts[int(r() * len(aopts))]
                if len(at) == 1:
                    AT.append([(at[0], ((leaf, True),), False)])
                else:
                    AT.append([(at[0], ((leaf, True),), False), (at[1], ((leaf, self.otm_sure),), False)])
            S = AS + S
            if self.flip:
                for unit in reversed(AT):    # mirror order: the adjective next to the noun stays next to it
                    NT = NT + unit
            else:
                for unit in reversed(AT):
                    NT = unit + NT
        # determiner
        u = r()
        det = [("this" if u < _P_THIS else "the" if u < _P_THE else "a"), "DET", "det", head, 0]
        S.insert(0, det)
        c = self.count + len(S)
        self.count = c
        if c > self.limit:
            raise _TooLong
        if u < _P_THIS:
            T = [(self.t["this"], ((det, True),), False)] + NT
        elif self.sov:
            T = NT                       # articles have no translation
        else:
            T = [(self.t["the" if u < _P_THE else "a"], ((det, True),), True)] + NT
        # modifiers: PP, relative clause
        if depth < self.max_depth:
            if self.nprep and r() < self.pp_rate:
                pS, pT, pn, prep = self.pp(depth + 1)
                pn[2], pn[3] = "nmod", head
                S += pS
                if self.sov:
                    T = pT + [self._particle(self.t["attr"], prep)] + T
                else:
                    T += pT
            if r() < self.rel_rate:
                kind = _ROBJ if r() < _P_OBJ_REL else _RSUBJ
                cS, cT, _ = self.clause(depth + 1, kind, head, animate)
                S += cS
                T = cT + T if self.sov else T + cT
        return S, T, head, animate

    def pp(self, depth: int):
        """Returns (source words, target words, head noun of the object, preposition)."""
        src, (tf,) = self.lex.preps[int(self.r() * self.nprep)]
        prep = [src, "ADP", "case", None, 0]
        self.count += 1
        nS, nT, noun, _ = self.np(depth)
        prep[3] = noun
        pt = (tf, ((prep, True),), True)
        return [prep] + nS, (nT + [pt] if self.sov else [pt] + nT), noun, prep

    def clause(self, depth: int, kind: int, head_noun=None, animate=False):
        """Returns (source words, target words, verb). Main clauses end with the punctuation."""
        r = self.r
        lex, t, sov = self.lex, self.t, self.sov
        # verb and tense
        if kind == _ROBJ:
            vl = lex.verbs_obj
        elif depth < self.max_depth and r() < self.comp_rate:
            vl = lex.verbs_sent
        else:
            vl = lex.verbs_plain
        vclass, sf, topts = vl[int(r() * len(vl))]
        tf = topts[0] if len(topts) == 1 else topts[int(r() * len(topts))]
        if kind == _MAIN:
            vrel, vhead = "root", None
        elif kind == _COMP:
            vrel, vhead = "ccomp", None          # the caller sets the head
        else:
            vrel, vhead = "acl:relcl", head_noun
        u = r()
        aux = None
        AUXT = None
        a = self.aux_rate
        if u < a:
            if u < a * 0.5:                      # future: will V
                v = [sf[2], "VERB", vrel, vhead, 0]
                aux = ["will", "AUX", "aux", v, 0]
                if sov:
                    VT = [(tf[4], ((aux, True), (v, True)), False)]
                else:
                    AUXT = [(t["will"], ((aux, True),), False)]
                    VT = [(tf[2], ((v, True),), False)]
            else:                                # perfect: has V-en
                v = [sf[3], "VERB", vrel, vhead, 0]
                aux = ["has", "AUX", "aux", v, 0]
                AUXT = [(t["has"], ((aux, True),), False)]
                VT = [(tf[3], ((v, True),), False)]
        else:
            k = 0 if u < a + (1.0 - a) * 0.5 else 1
            v = [sf[k], "VERB", vrel, vhead, 0]
            VT = [(tf[k], ((v, True),), False)]

        S = []
        T = []        # leading target material (complementiser, fronted adverb, relative pronoun)
        front = None
        if kind == _COMP:
            comp = ["that", "SCONJ", "mark", v, 0]
            S.append(comp)
            compT = (t["that"], ((comp, True),), True)
            if not sov:
                T.append(compT)
        # adverb
        advS = advT = None
        if self.nadv and r() < self.adv_rate:
            form, aopts = lex.adverbs[int(r() * self.nadv)]
            leaf = [form, "ADV", "advmod", v, 0]
            advS = leaf
            at = aopts[0] if len(aopts) == 1 else aopts[int(r() * len(aopts))]
            advT = [(at[0], ((leaf, True),), False)]
            if kind == _MAIN and r() < self.front_rate:
                front = advT
                S.append(leaf)
                advS = None
        c = self.count + len(S) + (2 if aux is not None else 1) + (advS is not None) + (kind != _COMP)
        self.count = c                           # + verb, aux, adverb, and punctuation or rel. pronoun
        if c > self.limit:
            raise _TooLong
        # subject
        if kind == _RSUBJ:
            rp = ["who" if animate else "that", "PRON", "nsubj", v, 0]
            S.append(rp)
            subjT = [] if sov else [(t["who" if animate else "which"], ((rp, True),), True)]
        else:
            if kind == _ROBJ:
                rp = ["who" if animate else "that", "PRON", "obj", v, 0]
                S.append(rp)
                if not sov:
                    T.append((t["who" if animate else "which"], ((rp, True),), True))
            nS, subjT, sh, _ = self.np(depth)
            sh[2], sh[3] = "nsubj", v
            S += nS
            if sov:
                subjT.append(self._particle(t["topic"] if kind == _MAIN else t["subj"], sh))
        if aux is not None:
            S.append(aux)
        S.append(v)
        # post-verbal constituents in source order: (source words, target words, is complement clause)
        post = []
        if vclass == 2:
            nS, nT, nh, _ = self.np(depth)
            nh[2], nh[3] = "iobj", v
            if sov:
                nT.append(self._particle(t["iobj"], nh))
            post.append((nS, nT, False))
        if vclass in (1, 2) and kind != _ROBJ:
            nS, nT, nh, _ = self.np(depth)
            nh[2], nh[3] = "obj", v
            if sov:
                nT.append(self._particle(t["obj"], nh))
            post.append((nS, nT, False))
        elif vclass == 3:
            cS, cT, cv = self.clause(depth + 1, _COMP)
            cv[3] = v
            post.append((cS, cT, True))
        if depth < self.max_depth and self.nprep and r() < self.pp_rate:
            pS, pT, pn, _ = self.pp(depth + 1)
            pn[2], pn[3] = "obl", v
            post.append((pS, pT, False))
        if advS is not None:
            post.append(([advS], advT, False))
        for ps in post:
            S += ps[0]

        # target order
        if sov:
            if front:
                T = front + T
            T += subjT
            for ps in reversed(post):
                T += ps[1]
            T += VT
            if AUXT:
                T += AUXT
            if kind == _COMP:
                T.append(compT)
        elif self.v2:
            middle, extra = [], []
            for ps in post:
                if ps[2]:
                    extra += ps[1]
                else:
                    middle += ps[1]
            if kind == _MAIN:
                fin, nonfin = (AUXT, VT) if AUXT else (VT, [])
                if front:
                    T = front + fin + subjT
                else:
                    T = subjT + fin
                T += middle
                T += nonfin
                T += extra
            else:
                T += subjT
                T += middle
                T += VT
                if AUXT:
                    T += AUXT
                T += extra
        else:
            if front:
                T = front + T
            T += subjT
            if AUXT:
                T += AUXT
            T += VT
            for ps in post:
                T += ps[1]
        if kind == _MAIN:
            p = [PUNCT, "PUNCT", "punct", v, 0]
            S.append(p)
            T.append((PUNCT, ((p, True),), False))
        return S, T, v


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


def _stream(config: SyntheticConfig, split: str, lex: _Lexicon | None = None) -> Iterator[SyntheticPair]:
    """Endless stream of pairs for ``split`` (its own RNG derived from the seed and the split name)."""
    lex = lex or _Lexicon(config)
    rng = random.Random(_split_seed(config.seed, split))
    g = _Grammar(config, lex, rng)
    r = rng.random
    max_len = config.max_len
    drop, ins = config.drop_rate, config.insert_rate
    fillers = lex.fillers
    sov = config.profile == "sov"
    clause = g.clause
    while True:
        for _ in range(_MAX_ATTEMPTS):
            g.count = 0
            try:
                S, T, _v = clause(0, _MAIN)
            except _TooLong:
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
            raise ConfigError(f"synthetic: no pair within max_len={max_len} in {_MAX_ATTEMPTS} attempts; "
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
    lex = _Lexicon(config or SyntheticConfig())
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
    ``config.json`` and ``README.txt`` in ``out_dir``. Every file is written atomically.

    Args:
        sizes: pairs per split, default ``{"train": 10000, "dev": 500, "test": 500}``; any split names
            are allowed; splits of size 0 are not written.
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lex = _Lexicon(config)
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


def _write_split(out: Path, split: str, n: int, config: SyntheticConfig, lex: _Lexicon,
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


# ------------------------------------------------------------------------------------------ CLI
_CLI_OPTIONS = [
    # (flag, config field, type, help)
    ("--profile", "profile", str, "target word order: " + "; ".join(f"{k} = {v}" for k, v in PROFILES.items())),
    ("--seed", "seed", int, "seed of the sentence streams (each split derives its own)"),
    ("--lexicon-seed", "lexicon_seed", int, "seed of the bilingual lexicon; fix it to draw new sentences of "
                                            "the same language pair"),
    ("--nouns", "nouns", int, "number of nouns in the lexicon (>= 2)"),
    ("--verbs", "verbs", int, "number of verbs in the lexicon (>= 4: intransitive, transitive, ditransitive, "
                              "sentential)"),
    ("--adjectives", "adjectives", int, "number of adjectives (0 disables them)"),
    ("--adverbs", "adverbs", int, "number of adverbs (0 disables them)"),
    ("--prepositions", "prepositions", int, "number of prepositions, at most 10 (0 disables PPs)"),
    ("--max-len", "max_len", int, "maximum sentence length in tokens on either side (longer pairs are redrawn)"),
    ("--max-depth", "max_depth", int, "maximum nesting of PPs, relative and complement clauses"),
    ("--adj-rate", "adj_rate", float, "probability of an adjective on a noun (and of a second one)"),
    ("--pp-rate", "pp_rate", float, "probability of a PP on an NP, and on a VP"),
    ("--rel-rate", "rel_rate", float, "probability of a relative clause on an NP"),
    ("--comp-rate", "comp_rate", float, "probability of a sentential verb with a 'that' clause"),
    ("--adv-rate", "adv_rate", float, "probability of an adverb in a clause"),
    ("--front-rate", "front_rate", float, "probability that a main-clause adverb opens the sentence"),
    ("--aux-rate", "aux_rate", float, "probability of an auxiliary tense (will V / has V-en)"),
    ("--one-to-many", "one_to_many", float, "fraction of nouns and adjectives translated by two target words"),
    ("--one-to-many-link", "one_to_many_link", str, "link type of the second word of a one-to-many translation "
                                                    "(sure | possible)"),
    ("--many-to-one", "many_to_one", float, "fraction of nouns that are two-word compounds translated by one word"),
    ("--particle-link", "particle_link", str, "alignment of case particles: possible (to their noun) | none"),
    ("--noise-synonyms", "synonym_rate", float, "noise: fraction of content words with 2-3 target synonyms"),
    ("--noise-drop", "drop_rate", float, "noise: probability of dropping each target function word"),
    ("--noise-insert", "insert_rate", float, "noise: probability of inserting an unaligned filler word before "
                                             "each target word"),
]


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``xlpe synth``. Generator options left out keep their value from ``--config`` or the
    :class:`SyntheticConfig` default (shown in each help)."""
    d = SyntheticConfig()
    parser.add_argument("--out", "-o", required=True, default=argparse.SUPPRESS,
                        help="output folder (created if missing)")
    parser.add_argument("--train", type=int, default=10000, help="number of training pairs")
    parser.add_argument("--dev", type=int, default=500, help="number of development pairs")
    parser.add_argument("--test", type=int, default=500, help="number of test pairs")
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="JSON",
                        help="load generator options from a JSON file (a config.json written by synth, or a "
                             "SyntheticConfig mapping); options given on the command line override it")
    g = parser.add_argument_group("generator options")
    for flag, name, typ, help_ in _CLI_OPTIONS:
        kw: dict[str, Any] = {}
        if name == "profile":
            kw["choices"] = list(PROFILES)
        elif name == "one_to_many_link":
            kw["choices"] = ["sure", "possible"]
        elif name == "particle_link":
            kw["choices"] = ["possible", "none"]
        default = getattr(d, name)
        shown = "--seed" if name == "lexicon_seed" else default
        g.add_argument(flag, dest=name, type=typ, default=argparse.SUPPRESS,
                       help=f"{help_} [default: {shown}]", **kw)
    parser.add_argument("--no-dedup", dest="dedup", action="store_false", default=argparse.SUPPRESS,
                        help="do not make the splits disjoint (by default test is generated first, dev skips "
                             "test sentences and train skips dev and test sentences)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar")


def config_from_args(args: argparse.Namespace) -> SyntheticConfig:
    """The :class:`SyntheticConfig` of parsed ``xlpe synth`` arguments (``--config`` then overrides)."""
    base = load_config(args.config).to_dict() if getattr(args, "config", None) else SyntheticConfig().to_dict()
    for _, name, _, _ in _CLI_OPTIONS:
        if hasattr(args, name):
            base[name] = getattr(args, name)
    return SyntheticConfig.from_dict(base)


def cli_main(args: argparse.Namespace) -> int:
    """Run ``xlpe synth``; returns 0. Bad options raise :class:`~xlpe.errors.ConfigError`."""
    cfg = config_from_args(args)
    sizes = {"train": args.train, "dev": args.dev, "test": args.test}
    paths = synth(args.out, cfg, sizes, dedup=getattr(args, "dedup", True), progress=getattr(args, "progress", False))
    with open(paths["config.json"], encoding="utf-8") as f:
        written = json.load(f)["written"]
    print(f"wrote {', '.join(f'{k} {v}' for k, v in written.items())} pairs ({cfg.profile}) to {args.out}")
    return 0
