"""eflomal's Dirichlet priors, indexed by word so that each chunk of a corpus gets the priors of its words."""

from __future__ import annotations

import itertools
import os

from xlpe.align.eflomal_format import import_eflomal
from xlpe.errors import FormatError
from xlpe.io.atomic import atomic_write
from xlpe.io.text import open_input

# --- priors ---------------------------------------------------------------------------------------------


class Priors:
    """eflomal's Dirichlet priors (pseudo-counts), indexed by word for fast per-chunk selection.

    * ``lex[src][tgt]``: lexical (LEX) priors; ``<NULL>`` allowed on either side (eflomal's NULL word);
    * ``hmmf[jump]``, ``hmmr[jump]``: jump priors of the forward / reverse HMM;
    * ``ferf[src][fertility]``, ``ferr[tgt][fertility]``: fertility priors.

    Words are in eflomal form (:func:`eflomal_token` of the normalised token). Files use eflomal's
    text format (``LEX\\tsrc\\ttgt\\talpha``, ``HMMF\\tjump\\talpha``, ...), read and written with eflomal's
    own ``read_priors``/``write_priors``.
    """

    def __init__(self):
        self.lex: dict[str, dict[str, float]] = {}
        self.hmmf: dict[int, float] = {}
        self.hmmr: dict[int, float] = {}
        self.ferf: dict[str, dict[int, float]] = {}
        self.ferr: dict[str, dict[int, float]] = {}

    def __len__(self) -> int:
        return (sum(map(len, self.lex.values())) + len(self.hmmf) + len(self.hmmr)
                + sum(map(len, self.ferf.values())) + sum(map(len, self.ferr.values())))

    @property
    def n_lex(self) -> int:
        return sum(map(len, self.lex.values()))

    @classmethod
    def from_counts(cls, lex, hmmf, hmmr, ferf, ferr) -> "Priors":
        """From the five Counters returned by ``eflomal.calculate_priors``."""
        p = cls()
        for (s, t), a in lex.items():
            p.lex.setdefault(s, {})[t] = float(a)
        p.hmmf = {int(k): float(v) for k, v in hmmf.items()}
        p.hmmr = {int(k): float(v) for k, v in hmmr.items()}
        for (s, f), a in ferf.items():
            p.ferf.setdefault(s, {})[int(f)] = float(a)
        for (t, f), a in ferr.items():
            p.ferr.setdefault(t, {})[int(f)] = float(a)
        return p

    @classmethod
    def estimate(cls, src_path: str, tgt_path: str, src_words: list[str], tgt_words: list[str], fwd_path: str,
                 rev_path: str) -> "Priors":
        """Priors from an eflomal job's forward and reverse links (``fwd_path``, ``rev_path``) with eflomal's
        ``calculate_priors`` (streamed), reading the sentences back from the job's input files (``*_words``:
        id -> eflomal token)."""
        ef = import_eflomal()

        def sentences(f, words):
            next(f, None)  # header
            for line in f:
                yield " ".join([words[int(x)] for x in line.split()[1:]])

        with open(src_path, encoding="ascii") as fs, open(tgt_path, encoding="ascii") as ft, \
                open(fwd_path, encoding="utf-8") as ff, open(rev_path, encoding="utf-8") as rf:
            counts = ef.calculate_priors(sentences(fs, src_words), sentences(ft, tgt_words), ff, rf)
        return cls.from_counts(*counts)

    def _add_read(self, parsed) -> None:
        lex, hmmf, hmmr, ferf, ferr = parsed
        for s, t, a in lex:
            d = self.lex.setdefault(s, {})
            d[t] = d.get(t, 0.0) + a
        self.hmmf.update(hmmf)
        self.hmmr.update(hmmr)
        for s, f, a in ferf:
            self.ferf.setdefault(s, {})[f] = a
        for t, f, a in ferr:
            self.ferr.setdefault(t, {})[f] = a

    @classmethod
    def read(cls, path: str | os.PathLike, batch: int = 200_000) -> "Priors":
        """Read an eflomal priors file with eflomal's ``read_priors``, in batches (flat memory overhead)."""
        ef = import_eflomal()
        p = cls()
        start = 1
        with open_input(path, "r", encoding="utf-8", expected="an eflomal priors file",
                        missing="priors file not found") as f:
            while True:
                try:
                    lines = list(itertools.islice(f, batch))
                except UnicodeDecodeError as e:
                    raise FormatError(f"invalid UTF-8 at or after line {start} ({e.reason})", path,
                                      expected="an eflomal priors file (UTF-8 text)") from None
                if not lines:
                    break
                try:
                    p._add_read(ef.read_priors(lines))
                except (ValueError, TypeError, IndexError) as e:
                    raise FormatError(f"invalid priors line between lines {start} and {start + len(lines) - 1} "
                                      f"({e})", path, expected="eflomal priors: LEX/HMMF/HMMR/FERF/FERR "
                                      "tab-separated records") from None
                start += len(lines)
        return p

    def write(self, path: str | os.PathLike) -> None:
        """Write atomically in eflomal's format (byte-identical to one ``eflomal.write_priors`` call)."""
        ef = import_eflomal()
        with atomic_write(path) as f:
            for s in sorted(self.lex):  # one call per source word keeps memory flat; order is unchanged
                ef.write_priors(f, {(s, t): a for t, a in self.lex[s].items()}, {}, {}, {}, {})
            ef.write_priors(f, {}, {}, {}, {(s, k): a for s, d in self.ferf.items() for k, a in d.items()}, {})
            ef.write_priors(f, {}, {}, {}, {}, {(t, k): a for t, d in self.ferr.items() for k, a in d.items()})
            ef.write_priors(f, {}, self.hmmf, self.hmmr, {}, {})

    def restricted(self, src_vocab: dict[str, int], tgt_vocab: dict[str, int]):
        """The priors that concern these vocabularies, as ``eflomal.read_priors`` returns them.

        Feeding only these to ``eflomal.to_eflomal_priors_file`` gives the same file as feeding everything
        (it drops unknown words), but costs time proportional to the chunk, not to the priors (eflomal#24).
        """
        lex_list = []
        tgt_keys = list(tgt_vocab) + ["<NULL>"]
        for s in itertools.chain(src_vocab, ("<NULL>",)):
            d = self.lex.get(s)
            if not d:
                continue
            if len(d) <= len(tgt_keys):
                lex_list.extend((s, t, a) for t, a in d.items() if t in tgt_vocab or t == "<NULL>")
            else:
                lex_list.extend((s, t, d[t]) for t in tgt_keys if t in d)
        ferf = [(s, k, a) for s in src_vocab if s in self.ferf for k, a in self.ferf[s].items()]
        ferr = [(t, k, a) for t in tgt_vocab if t in self.ferr for k, a in self.ferr[t].items()]
        return lex_list, self.hmmf, self.hmmr, ferf, ferr


class PriorIndex:
    """Vocabulary view in the shape ``eflomal.to_eflomal_priors_file`` expects (1-based ids, None if absent)."""

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def __len__(self) -> int:
        return len(self.vocab)

    def __getitem__(self, word: str):
        e = self.vocab.get(word)
        return None if e is None else e + 1
