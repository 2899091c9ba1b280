"""The BTG preorderer's configuration (:class:`BTGConfig`), lader's feature templates and their parser, the
loss profiles, edge types and the 64-bit feature hashing (SPEC §5.1)."""

from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from dataclasses import dataclass
from typing import Literal

import numpy as np

from xlpe.errors import ConfigError

# lader's default feature profile for the words (SPEC §5.1) and for tag-like factor columns
# (example/train-model.sh: "for all tag-based annotations (class, POS)").
DEFAULT_TEMPLATES: tuple[str, ...] = (
    "LL%SL%ET", "RR%SR%ET", "LR%LR%ET", "RL%RL%ET", "O%SL%SR%ET", "I%LR%RL%ET",
    "CL%CL%ET", "B%SB%ET", "A%SA%ET", "N%SN%ET", "BIAS%ET",
)
FACTOR_TEMPLATES: tuple[str, ...] = (
    "LL%SL%ET", "RR%SR%ET", "LR%LR%ET", "RL%RL%ET", "B%SB%ET", "A%SA%ET", "O%SL%SR%ET", "I%LR%RL%ET",
)

FORMAT_VERSION = 1
ORACLE_LOSS_WEIGHT = -1e6  # lader: "penalizing loss heavily (oracle)"

# Edge types and their slot in the span table; S and I are slots 0 and 1 of the split/shape tables.
FORWARD, STRAIGHT, INVERTED, BACKWARD = 0, 1, 2, 3
TYPE_CHARS = "FSIB"

# ------------------------------------------------------------------------------------------------
# hashing

U64 = np.uint64
_MIX_MULTIPLIER = U64(0x9E3779B97F4A7C15)
_FINISH_MULTIPLIER = U64(0xBF58476D1CE4E5B9)
_SHIFT_29, _SHIFT_31, _SHIFT_32 = U64(29), U64(31), U64(32)


def hash_str(s: str) -> int:
    """A stable 64-bit hash of a string (Python's own ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")


def hash_mix(h: np.ndarray | np.uint64, x: np.ndarray | np.uint64) -> np.ndarray:
    """Fold value(s) ``x`` into hash(es) ``h`` (broadcasting, wrap-around uint64 arithmetic)."""
    h = (np.asarray(h, dtype=U64) ^ np.asarray(x, dtype=U64)) * _MIX_MULTIPLIER
    return h ^ (h >> _SHIFT_29)


def hash_finish(h: np.ndarray, bits: int) -> np.ndarray:
    h = (h ^ (h >> _SHIFT_31)) * _FINISH_MULTIPLIER
    h = h ^ (h >> _SHIFT_32)
    return (h >> U64(64 - bits)).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# templates

# word-position items of the span scope: which end of the span, and the offset from it
POS_L = {"SL": 0, "SB": -1, "LL": 0, "LB": -1}
POS_R = {"SR": 0, "SA": 1, "RR": 0, "RA": 1}
# word-position items of the split scope (c = first word of the right child): offset from c
POS_C = {"LR": -1, "RL": 0, "RB": -1, "LA": 0}
# items that depend on the node shape (length L, left-child length a)
_SHAPE_ITEMS = {"CL", "CB", "CD", "LN", "RN"}
# xlpe extension (not in lader): "SP" = number of punctuation words inside the span, capped at 3. With it,
# e.g. "P%SP%ET", the model can learn not to invert spans across clause boundaries.
SPAN_PUNCT = "SP"


def is_punct(word: str) -> bool:
    return bool(word) and all(unicodedata.category(ch)[0] in "PS" for ch in word)


@dataclass(frozen=True)
class Template:
    name: str
    items: tuple[str, ...]
    scope: str            # 'span' | 'split' | 'shape'
    nonterm_only: bool    # lader: a template with an L, R or C item fires on S/I edges only
    factor: int

    @property
    def seed(self) -> int:
        return hash_str(f"{self.name}%{'%'.join(self.items)}@{self.factor}")


def parse_template(spec: str, factor: int) -> Template:
    parts = spec.split("%")
    if len(parts) < 2 or not parts[0]:
        raise ConfigError(f"feature template {spec!r} is malformed (expected NAME%item%...)")
    name, items = parts[0], tuple(parts[1:])
    kinds = set()
    for it in items:
        if it == "ET":
            continue
        if it in POS_L or it in POS_R or it in ("SN", SPAN_PUNCT):
            kinds.add("span")
        elif it in POS_C:
            kinds.add("split")
        elif it in _SHAPE_ITEMS:
            kinds.add("shape")
        else:
            raise ConfigError(
                f"feature template {spec!r}: item {it!r} is not supported (supported: "
                f"{sorted([*POS_L, *POS_R, 'SN', SPAN_PUNCT, *POS_C, *_SHAPE_ITEMS, 'ET'])}; "
                f"phrase-dictionary 'Q', span string 'SS' and parse items are not implemented)")
    if len(kinds) > 1:
        raise ConfigError(f"feature template {spec!r} mixes span, split-point and shape items; each template "
                          f"must depend on only one of them (edge scores are decomposed that way)")
    scope = kinds.pop() if kinds else "span"
    nonterm_only = any(it[0] in "LRC" for it in items)
    return Template(name, items, scope, nonterm_only, factor)


def parse_loss_profile(profile: str | dict) -> dict[str, float]:
    """lader's ``loss_profile`` (``"chunk=1"``, ``"chunk=1|tau=1"``) as ``{'chunk': w, 'tau': w}``."""
    if isinstance(profile, dict):
        out = {str(k): float(v) for k, v in profile.items()}
    else:
        out = {}
        for part in str(profile).split("|"):
            name, sep, val = part.partition("=")
            try:
                out[name.strip()] = float(val) if sep else 1.0
            except ValueError:
                raise ConfigError(f"loss profile {profile!r}: weight {val!r} is not a number") from None
    for k in out:
        if k not in ("chunk", "tau"):
            raise ConfigError(f"loss profile {profile!r}: unknown loss {k!r} (known: chunk, tau)")
    return {"chunk": out.get("chunk", 0.0), "tau": out.get("tau", 0.0)}


# ------------------------------------------------------------------------------------------------
# configuration


@dataclass
class BTGConfig:
    """Options of :class:`BTGPreorderer` (lader names in brackets; SPEC §5.1, §5.4).

    Args:
        max_term: longest forward (and backward) terminal span [``max_term``, 5].
        use_reverse: allow backward terminals [``use_reverse``, false].
        templates: feature templates of factor 0 (the words) [``feature_profile``].
        factor_templates: templates of every further factor column (word classes, POS, …).
        factors: factor columns per token; with ``factors > 1`` every token must be
            ``word<sep>class<sep>…`` with exactly that many parts. 1 = tokens are used whole.
        factor_sep: the separator inside a token (``|``).
        hash_bits: the weight vector has ``2**hash_bits`` entries (feature hashing).
        loss: loss profile, ``"chunk=1"`` (lader default), ``"tau=1"`` or ``"chunk=1|tau=1"`` [``loss_profile``].
        learner: ``"pegasos"`` (lader default), ``"perceptron"`` [``learner``] or ``"mira"`` (1-best
            passive-aggressive, PA-I: the step is the smallest that makes the oracle beat the
            loss-augmented model by its loss, capped at ``mira_c``; not in lader).
        cost: Pegasos λ [``cost``, 1e-3].
        beam: hypotheses per span kept in loss-augmented (training) search [``beam``]; prediction
            is exact with one. 1 is exact for ``tau`` alone, and for the oracle of binarisable orders.
        max_len: training sentences longer than this are skipped and counted (40, SPEC §5.2).
        seed: shuffling seed.
        shuffle: visit the training sentences in a new random order every iteration.
        cache_features: keep the per-sentence feature index arrays between iterations.
        loss_augmented: the model derivation maximises score + loss (lader
            ``loss_augmented_inference``, true); false: the plain best-scoring derivation.
        average: predict with the average of the weights after every training step (averaged
            perceptron / averaged Pegasos iterates; not in lader, off by default).
        mira_c: the largest MIRA step.
    """

    max_term: int = 5
    use_reverse: bool = False
    templates: tuple[str, ...] = DEFAULT_TEMPLATES
    factor_templates: tuple[str, ...] = FACTOR_TEMPLATES
    factors: int = 1
    factor_sep: str = "|"
    hash_bits: int = 22
    loss: str = "chunk=1"
    learner: Literal["pegasos", "perceptron", "mira"] = "pegasos"
    cost: float = 1e-3
    beam: int = 4
    max_len: int = 40
    seed: int = 0
    shuffle: bool = True
    cache_features: bool = True
    loss_augmented: bool = True
    average: bool = False
    mira_c: float = 1.0

    def validate(self) -> "BTGConfig":
        if self.max_term < 1:
            raise ConfigError(f"max_term must be >= 1, not {self.max_term}")
        if self.factors < 1:
            raise ConfigError(f"factors must be >= 1, not {self.factors}")
        if not 8 <= self.hash_bits <= 30:
            raise ConfigError(f"hash_bits must be in 8..30, not {self.hash_bits}")
        if self.learner not in ("pegasos", "perceptron", "mira"):
            raise ConfigError(f"learner must be 'pegasos', 'perceptron' or 'mira', not {self.learner!r}")
        if self.learner == "mira" and not self.mira_c > 0:
            raise ConfigError(f"mira_c must be > 0, not {self.mira_c}")
        if self.learner == "pegasos" and not self.cost > 0:
            raise ConfigError(f"cost (Pegasos lambda) must be > 0, not {self.cost}")
        if self.beam < 1:
            raise ConfigError(f"beam must be >= 1, not {self.beam}")
        if self.max_len < 1:
            raise ConfigError(f"max_len must be >= 1, not {self.max_len}")
        if self.factors > 1 and not self.factor_sep:
            raise ConfigError("factor_sep must not be empty when factors > 1")
        lw = parse_loss_profile(self.loss)
        if lw["chunk"] < 0 or lw["tau"] < 0 or lw["chunk"] + lw["tau"] == 0:
            raise ConfigError(f"loss profile {self.loss!r} needs a positive weight")
        self.templates = tuple(self.templates)
        self.factor_templates = tuple(self.factor_templates)
        for f in range(self.factors):
            for t in (self.templates if f == 0 else self.factor_templates):
                parse_template(t, f)
        return self

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["templates"], d["factor_templates"] = list(self.templates), list(self.factor_templates)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BTGConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown BTGConfig options: {sorted(unknown)}")
        d = dict(d)
        for k in ("templates", "factor_templates"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d).validate()


