"""The bilingual lexicon of a synthetic pair: invented content words with their translations, and the function words."""

from __future__ import annotations

import random

from xlpe.errors import XlpeError
from xlpe.data.synthetic.config import PUNCT, SyntheticConfig, SRC_FUNCTION, SRC_PREPOSITIONS, VERB_CLASS_FRACTIONS


# ------------------------------------------------------------------------------------------ lexicon
_SRC_ONSETS = ("b", "bl", "br", "d", "dr", "f", "fl", "fr", "g", "gl", "gr", "k", "kl", "kr", "l", "m", "n",
               "p", "pl", "pr", "s", "sk", "sl", "sn", "sp", "st", "t", "tr", "v", "w", "z")
_SRC_VOWELS = ("a", "e", "i", "o", "u", "a", "o", "i")
_SRC_CODAS = ("b", "d", "g", "k", "l", "m", "n", "p", "r", "t", "x", "nd", "nt", "rk", "sk", "st", "mp", "lf")
_TGT_CONS = ("k", "s", "t", "n", "h", "m", "y", "r", "w", "g", "z", "d", "b", "p", "sh", "ch")
_TGT_VOWELS = ("a", "i", "u", "e", "o")
# target verb suffixes: present, past, infinitive, participle, future (sov)
_TGT_VERB_SUFFIXES = ("mu", "ta", "ru", "te", "ro")


class Lexicon:
    """The seeded bilingual lexicon. All forms on both sides are unique (the used-set is shared)."""

    def __init__(self, cfg: SyntheticConfig):
        seed = cfg.seed if cfg.lexicon_seed is None else cfg.lexicon_seed
        rng = random.Random(f"xlpe-synthetic-lexicon:{seed}")
        self._rng = rng
        self.used: set[str] = set(SRC_FUNCTION)
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
                      for p in SRC_PREPOSITIONS[:cfg.prepositions]]

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

        # verbs: sentential first (~15%, >= 1), the rest by VERB_CLASS_FRACTIONS, each class >= 1
        n_sent = max(1, int(round(0.15 * cfg.verbs)))
        rest = cfg.verbs - n_sent
        n_intr = max(1, int(round(VERB_CLASS_FRACTIONS[0] * rest)))
        n_ditr = max(1, int(round(VERB_CLASS_FRACTIONS[2] * rest)))
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
        src = set(SRC_FUNCTION[:8]) | {p for p, _ in self.preps}
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
