"""The options of a synthetic language pair (:class:`SyntheticConfig`), its profiles and shared constants, and
the generated pair type."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from xlpe.config import option, read_config_text
from xlpe.errors import ConfigError
from xlpe.io.alignments import Alignment
from xlpe.io.conllu import DepTree
from xlpe.io.orders import invert_order


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
SRC_PREPOSITIONS = ("in", "on", "with", "near", "under", "from", "behind", "for", "at", "over")
SRC_FUNCTION = ("the", "a", "this", "who", "that", "will", "has", PUNCT) + SRC_PREPOSITIONS

# fractions of the non-sentential verbs; sentential verbs are ~15% of all verbs (at least one)
VERB_CLASS_FRACTIONS = (0.3, 0.5, 0.2)      # intransitive, transitive, ditransitive
P_THIS, P_THE = 0.15, 0.6                   # determiner: this 15%, the 45%, a 40%
P_OBJ_REL = 0.4                              # share of object relatives among relative clauses

# clause kinds: a main clause, a subject / object relative clause, a complement clause
CLAUSE_MAIN, CLAUSE_SUBJECT_RELATIVE, CLAUSE_OBJECT_RELATIVE, CLAUSE_COMPLEMENT = 0, 1, 2, 3
MAX_ATTEMPTS = 10000                         # rejection sampling guard (max_len)
#: most pairs one :func:`~xlpe.data.synthetic.synth` run writes (about 5 GB, half an hour on one core)
MAX_PAIRS = 10_000_000
#: upper bounds of the lexicon sizes and of the sentence shape: the lexicon invents its words by rejection, which
#: slows down sharply beyond ten thousand words per class (10,000 verbs: 2 s, 100,000: 40 s); deeper nesting
#: only makes pairs that max_len rejects, and longer sentences than this are no test of word order
MAX_WORDS, MAX_DEPTH, MAX_LEN = 10_000, 20, 1000


# ------------------------------------------------------------------------------------------ config
@dataclass
class SyntheticConfig:
    """Options of the synthetic language pair. Defaults give a pair a small Transformer learns in minutes.

    Args:
        profile: target word order, one of :data:`PROFILES`.
        seed: seed of the sentence streams (each split derives its own stream from it).
        lexicon_seed: seed of the bilingual lexicon; ``None`` = ``seed``. Fix it to draw new sentences
            of the same language pair.
        nouns, verbs, adjectives, adverbs: lexicon sizes (source entries per class, at most
            :data:`MAX_WORDS`); ``verbs >= 4`` (one per class at least), ``adjectives``/``adverbs`` may be 0.
        prepositions: how many of the 10 English prepositions are used (0 disables PPs).
        max_len: maximum tokens on either side (longer pairs are drawn again; the target length checked
            is that of every profile, see the module docs); at most :data:`MAX_LEN`.
        max_depth: bound on nesting (PPs, relative clauses, complement clauses); at most :data:`MAX_DEPTH`.
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

    profile: str = option("sov", "target word order: "
                                 + "; ".join(f"{k} = {v}" for k, v in PROFILES.items()),
                                 choices=tuple(PROFILES))
    seed: int = option(1, "seed of the sentence streams (each split derives its own)")
    lexicon_seed: int | None = option(None, "seed of the bilingual lexicon; fix it to draw new sentences of the same "
                                            "language pair")
    nouns: int = option(40, "number of nouns in the lexicon (2 to 10000)")
    verbs: int = option(24, "number of verbs in the lexicon (4 to 10000: intransitive, transitive, ditransitive, "
                            "sentential)")
    adjectives: int = option(16, "number of adjectives (0 disables them; at most 10000)")
    adverbs: int = option(8, "number of adverbs (0 disables them; at most 10000)")
    prepositions: int = option(6, "number of prepositions, at most 10 (0 disables PPs)")
    max_len: int = option(20, "maximum sentence length in tokens on either side, at most 1000 (longer pairs are "
                                 "redrawn)")
    max_depth: int = option(2, "maximum nesting of PPs, relative and complement clauses (at most 20)")
    adj_rate: float = option(0.35, "probability of an adjective on a noun (and of a second one)")
    pp_rate: float = option(0.2, "probability of a PP on an NP, and on a VP")
    rel_rate: float = option(0.12, "probability of a relative clause on an NP")
    comp_rate: float = option(0.08, "probability of a sentential verb with a 'that' clause")
    adv_rate: float = option(0.2, "probability of an adverb in a clause")
    front_rate: float = option(0.4, "probability that a main-clause adverb opens the sentence")
    aux_rate: float = option(0.4, "probability of an auxiliary tense (will V / has V-en)")
    one_to_many: float = option(0.1, "fraction of nouns and adjectives translated by two target words")
    one_to_many_link: str = option("sure", "link type of the second word of a one-to-many translation (sure | "
                                           "possible)", choices=("sure", "possible"))
    many_to_one: float = option(0.1, "fraction of nouns that are two-word compounds translated by one word")
    particle_link: str = option("possible", "alignment of case particles: possible (to their noun) | none",
                                            choices=("possible", "none"))
    synonym_rate: float = option(0.0, "noise: fraction of content words with 2-3 target synonyms",
                                      aliases=("--noise-synonyms",))
    drop_rate: float = option(0.0, "noise: probability of dropping each target function word",
                                   aliases=("--noise-drop",))
    insert_rate: float = option(0.0, "noise: probability of inserting an unaligned filler word before each target "
                                     "word", aliases=("--noise-insert",))

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
        upper = {"nouns": MAX_WORDS, "verbs": MAX_WORDS, "adjectives": MAX_WORDS, "adverbs": MAX_WORDS,
                 "max_len": MAX_LEN, "max_depth": MAX_DEPTH}
        for name, hi in upper.items():
            if getattr(self, name) > hi:
                raise ConfigError(f"synthetic option {name} must be <= {hi}, not {getattr(self, name)}")
        if self.prepositions > len(SRC_PREPOSITIONS):
            raise ConfigError(f"synthetic option prepositions must be <= {len(SRC_PREPOSITIONS)}, "
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
    text = read_config_text(path)
    try:
        d = json.loads(text)
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
