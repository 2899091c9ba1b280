"""A lader-style BTG preorderer (Neubig, Watanabe & Mori, EMNLP 2012; SPEC §5): train it on oracle ranks, predict
lader ``order`` / ``string`` lines, save and load it.

The model, its features, losses and search are described in ``docs/reorder.md``; the configuration and feature
templates are in ``btg_config.py``, the features in ``btg_features.py``, scores, losses and CKY in ``btg_cky.py``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Callable, Iterable, Literal, Sequence

import numpy as np

from xlpe.errors import ConfigError, FormatError
from xlpe.io.orders import apply_order, format_order
from xlpe.io.process import WorkerPool
from xlpe.reorder.btg_config import (DEFAULT_TEMPLATES, FACTOR_TEMPLATES, FORMAT_VERSION, ORACLE_LOSS_WEIGHT,
                                     BTGConfig, parse_loss_profile)
from xlpe.reorder.btg_features import Extractor, Features
from xlpe.reorder.btg_cky import cky, Derivation, derivation_features, edge_scores, LossTables

__all__ = ["BTGConfig", "BTGPreorderer", "Derivation", "DEFAULT_TEMPLATES", "FACTOR_TEMPLATES",
           "format_order", "parse_loss_profile"]


# ------------------------------------------------------------------------------------------------
# multiprocessing workers (module level so that they can be pickled)

_WORKER: "BTGPreorderer | None" = None
_NO_FEATURES = np.zeros(0, dtype=np.int64)


def _worker_init(config: dict, w: np.ndarray) -> None:
    global _WORKER
    config = dict(config, average=False)  # the worker gets the final prediction weights
    m = BTGPreorderer(BTGConfig.from_dict(config))
    m._v = w
    _WORKER = m


def _worker_predict(sentences: list) -> list[list[int]]:
    return [_WORKER.predict(s) for s in sentences]


# ------------------------------------------------------------------------------------------------
# the model


class BTGPreorderer:
    """A lader-style BTG preorderer (SPEC §5; the method is described in ``docs/reorder.md``).

    Example::

        model = BTGPreorderer(BTGConfig(max_term=5))
        model.train(sentences, ranks, iterations=10)   # ranks from xlpe.reorder.oracle.lader_ranks
        order = model.predict(["ich", "habe", "ihn", "gesehen"])
        model.save("model_dir"); same = BTGPreorderer.load("model_dir")
    """

    def __init__(self, config: BTGConfig | None = None):
        self.config = (config or BTGConfig()).validate()
        self._ext = Extractor(self.config)
        size = (1 << self.config.hash_bits) + 1  # + the always-zero null slot
        # current weights w = alpha * v (lader's scaled Pegasos vector; alpha stays 1 for the perceptron)
        self._v = np.zeros(size, dtype=np.float64)
        self._alpha = 1.0
        self._t = 1            # Pegasos step counter (sentences seen)
        self._v_sq = 0.0       # |v|^2, kept up to date incrementally
        # averaging (config.average): sum of w after every step = A * v - u, over `_steps` steps
        self._u = np.zeros(size, dtype=np.float64) if self.config.average else None
        self._A = 0.0
        self._steps = 0
        self._pred_cache: np.ndarray | None = None
        self.history: list[dict] = []

    # -- weights

    def _prediction_weights(self) -> np.ndarray:
        """The weight vector used to predict (cached until the next training step): the averaged weights
        when ``average`` is on, else ``alpha·v``. Every process predicts from this same vector, so orders
        do not depend on the number of processes."""
        if self._pred_cache is None:
            if self._u is not None and self._steps > 0:
                self._pred_cache = (self._A * self._v - self._u) / self._steps
            else:
                self._pred_cache = self._alpha * self._v
        return self._pred_cache

    @property
    def weights(self) -> np.ndarray:
        """The weight vector used for prediction (a copy; the last entry is the always-zero null slot)."""
        return self._prediction_weights().copy()

    def _step(self, idx_plus: np.ndarray, idx_minus: np.ndarray, violation: float = 0.0) -> int:
        """One online step towards ``φ(oracle) − φ(model)`` (both may be empty: Pegasos then only shrinks).

        ``violation`` (MIRA only) is ``score(model) + loss(model) − score(oracle) − loss(oracle)``.
        Returns the number of weights changed.
        """
        self._pred_cache = None
        allidx = np.concatenate([idx_plus, idx_minus])
        sign = np.concatenate([np.ones(len(idx_plus)), -np.ones(len(idx_minus))])
        u, inv = np.unique(allidx, return_inverse=True)
        d = np.bincount(inv, weights=sign, minlength=len(u))
        keep = d != 0
        u, d = u[keep], d[keep]
        if self.config.learner == "perceptron":
            delta = d
        elif self.config.learner == "mira":
            sq = float(np.dot(d, d))
            delta = d * (min(self.config.mira_c, max(violation, 0.0) / sq) if sq > 0 else 0.0)
        else:
            # Pegasos (Shalev-Shwartz et al. 2007, Fig. 1) with w = alpha·v, as in lader's reorderer-model.cc
            lam, t = self.config.cost, self._t
            nu = 1.0 / (lam * t)
            self._alpha = 1.0 if t == 1 else (1.0 - nu * lam) * self._alpha
            delta = d * (nu / self._alpha)
        old = self._v[u]
        new = old + delta
        self._v[u] = new
        self._v_sq += float(np.dot(new, new) - np.dot(old, old))
        if self._u is not None:
            self._u[u] += delta * self._A
        if self.config.learner == "pegasos":
            lam = self.config.cost
            w_sq = self._v_sq * self._alpha ** 2
            if w_sq > 1.0 / lam:  # projection onto the ball |w|^2 <= 1/lambda
                self._alpha *= math.sqrt(1.0 / lam / w_sq)
            # fold alpha into v before it underflows; much earlier when averaging, because the average
            # A·v − u is a difference of two large numbers once alpha is small
            if self._v_sq > 1e100 or self._alpha < (1e-4 if self._u is not None else 1e-100):
                if self._u is not None:
                    total = self._A * self._v - self._u
                    self._u = -total
                    self._A = 0.0
                self._v *= self._alpha
                self._v_sq = float(np.dot(self._v, self._v))
                self._alpha = 1.0
            self._t += 1
        self._A += self._alpha
        self._steps += 1
        return len(u)

    # -- core

    def _check_sentence(self, sentence) -> list[str]:
        if isinstance(sentence, str):
            sentence = [t for t in sentence.split(" ") if t]
        return list(sentence)

    def features(self, sentence: Sequence[str]) -> Features:
        return self._ext.extract(self._check_sentence(sentence))

    def derive(self, sentence: Sequence[str], ranks: Sequence[int] | None = None, *,
               loss_weight: float = 0.0, beam: int | None = None) -> Derivation:
        """The best derivation of ``score + loss_weight·loss`` (``loss_weight`` 0: prediction; 1: lader's
        loss-augmented model; −1e6: the oracle). ``ranks`` are needed when ``loss_weight`` is not 0."""
        sentence = self._check_sentence(sentence)
        n = len(sentence)
        if n == 0:
            return Derivation([], 0.0, 0.0, [])
        f = self._ext.extract(sentence)
        sc = edge_scores(self._prediction_weights(), f, 1.0)
        losses = None
        if loss_weight != 0:
            if ranks is None:
                raise ConfigError("loss-augmented search needs the oracle ranks")
            losses = self._loss_tables(ranks, n)
        return cky(n, sc, self.config, losses, loss_weight, beam or self.config.beam)

    @staticmethod
    def _dense_ranks(ranks: Sequence[int], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Ranks renumbered 0.. without gaps, and the mask of words without a rank (``-1``)."""
        r = np.asarray(ranks, dtype=np.int64).reshape(-1)
        if len(r) != n:
            raise FormatError(f"the sentence has {n} tokens but its ranks have {len(r)} entries",
                              expected="one rank per token")
        if n and r.min() < -1:
            raise FormatError(f"rank {int(r.min())}",
                              expected="ranks >= 0, or -1 for a word without a rank (from lader_ranks)")
        free = r < 0
        dense = np.zeros(n, dtype=np.int64)
        if (~free).any():
            dense[~free] = np.unique(r[~free], return_inverse=True)[1].reshape(-1)
        return dense, free

    def _loss_tables(self, ranks: Sequence[int], n: int) -> LossTables:
        lw = parse_loss_profile(self.config.loss)
        dense, free = self._dense_ranks(ranks, n)
        return LossTables(dense, lw["chunk"], lw["tau"], free)

    def predict(self, sentence: Sequence[str] | str) -> list[int]:
        """The predicted order (lader ``order``): ``order[k]`` = original index of the k-th output word.

        ``sentence`` is a token list (or a string split on spaces); tokens carry ``factors`` columns.
        """
        return self.derive(sentence).order

    def predict_many(self, sentences: Iterable[Sequence[str] | str], processes: int = 1, *,
                     chunksize: int = 32, progress: bool = False) -> list[list[int]]:
        """Orders for many sentences, in input order; identical for any ``processes``."""
        sentences = [self._check_sentence(s) for s in sentences]
        if processes < 1:
            raise ConfigError(f"processes must be >= 1, not {processes}")
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(sentences), desc="preorder", unit="sent")
        out: list[list[int]] = []
        if processes == 1 or len(sentences) < 2:
            for s in sentences:
                out.append(self.predict(s))
                if bar is not None:
                    bar.update(1)
        else:
            chunks = (sentences[k:k + chunksize] for k in range(0, len(sentences), chunksize))
            with WorkerPool(_worker_predict, processes, initializer=_worker_init,
                            initargs=(self.config.to_dict(), self._prediction_weights())) as pool:
                for orders in pool.map(chunks):
                    out.extend(orders)
                    if bar is not None:
                        bar.update(len(orders))
        if bar is not None:
            bar.close()
        return out

    def words(self, sentence: Sequence[str] | str) -> list[str]:
        """The first factor (the words) of a sentence."""
        return self._ext.split_factors(self._check_sentence(sentence))[0]

    def apply(self, sentences: Iterable[Sequence[str] | str], out_format: Literal["order", "string"] = "order",
              processes: int = 1, *, progress: bool = False) -> list[str]:
        """Output lines in lader's ``order`` or ``string`` (reordered words, first factor) format."""
        if out_format not in ("order", "string"):
            raise ConfigError(f"out_format must be 'order' or 'string', not {out_format!r}")
        sentences = [self._check_sentence(s) for s in sentences]
        orders = self.predict_many(sentences, processes, progress=progress)
        if out_format == "order":
            return [format_order(o) for o in orders]
        return [" ".join(apply_order(self.words(s), o)) for s, o in zip(sentences, orders)]

    # -- training

    def train(self, sentences: Sequence[Sequence[str] | str], ranks: Sequence[Sequence[int]],
              iterations: int = 10, *, progress: bool = True, early_stop: bool = True,
              callback: Callable[[dict], None] | None = None) -> list[dict]:
        """Online large-margin training with latent derivations (SPEC §5.4).

        Args:
            sentences: token lists (factor columns inside tokens when ``factors > 1``).
            ranks: oracle ranks per sentence (:func:`xlpe.reorder.oracle.lader_ranks`), same lengths;
                ``-1`` = a word without a rank (``attach_null="free"``), left out of the τ loss so that
                the oracle derivation may put it anywhere (τ-only loss profiles).
            iterations: passes over the data (lader's default is 500; stops early when an iteration's
                model loss equals its oracle loss).
            progress: show a tqdm bar per iteration.
            callback: called with each iteration's statistics.

        Returns:
            One dict per iteration: ``iteration``, ``model_loss`` (sum of loss-augmented model losses),
            ``oracle_loss``, ``updates``, ``sentences``, ``skipped`` (longer than ``max_len`` or empty),
            ``seconds``. Also appended to :attr:`history`.

        Raises:
            FormatError: the number of rank lines differs from the number of sentences, or a sentence
                and its ranks differ in length (the message names the 1-based sentence number).
        """
        cfg = self.config
        sentences = [self._check_sentence(s) for s in sentences]
        ranks = list(ranks)
        if len(sentences) != len(ranks):
            raise FormatError(f"{len(sentences)} sentences but {len(ranks)} rank lines",
                              expected="one rank line per training sentence")
        lw = parse_loss_profile(cfg.loss)
        data, skipped = self._training_data(sentences, ranks, lw)
        cache: dict[int, Features] = {}
        rng = np.random.default_rng(cfg.seed + len(self.history))
        stats = []
        iterator_cls = None
        if progress:
            from tqdm.auto import tqdm
            iterator_cls = tqdm
        for it in range(iterations):
            t0 = time.perf_counter()
            visit = rng.permutation(len(data)) if cfg.shuffle else np.arange(len(data))
            model_loss = oracle_loss = 0.0
            updates = 0
            seq = visit
            if iterator_cls is not None:
                seq = iterator_cls(visit, desc=f"btg iter {len(self.history) + 1}", unit="sent", leave=False)
            for s_i in seq:
                k, s, dense, free = data[s_i]
                lt = LossTables(dense, lw["chunk"], lw["tau"], free)
                f = cache.get(k)
                if f is None:
                    f = self._ext.extract(s)
                    if cfg.cache_features:
                        cache[k] = f
                n = f.n
                sc = edge_scores(self._v, f, self._alpha)
                model = cky(n, sc, cfg, lt, 1.0 if cfg.loss_augmented else 0.0, cfg.beam)
                oracle = cky(n, sc, cfg, lt, ORACLE_LOSS_WEIGHT, cfg.beam)
                model_loss += model.loss
                oracle_loss += oracle.loss
                if model.loss != oracle.loss:
                    self._step(derivation_features(f, oracle.edges, self._ext.null),
                               derivation_features(f, model.edges, self._ext.null),
                               model.score + model.loss - oracle.score - oracle.loss)
                    updates += 1
                else:  # lader: a Pegasos step with an empty vector still shrinks w; averaging counts it
                    self._step(_NO_FEATURES, _NO_FEATURES)
            st = {"iteration": len(self.history) + 1, "model_loss": model_loss, "oracle_loss": oracle_loss,
                  "updates": updates, "sentences": len(data), "skipped": skipped,
                  "seconds": time.perf_counter() - t0}
            self.history.append(st)
            stats.append(st)
            if progress:
                print(json.dumps(st), flush=True)
            if callback is not None:
                callback(st)
            if early_stop and model_loss == oracle_loss:
                break
        return stats

    def _training_data(self, sentences: list, ranks: list, lw: dict) -> tuple[list, int]:
        """The sentences to train on, ``(index, tokens, dense ranks, free-word mask)`` each, and how many were
        skipped (empty, or longer than ``max_len``); a rank line that does not fit its sentence is an error."""
        cfg = self.config
        data: list[tuple[int, list[str], np.ndarray, np.ndarray]] = []
        skipped = 0
        for k, (s, r) in enumerate(zip(sentences, ranks)):
            try:
                cols = self._ext.split_factors(s)
                dense, free = self._dense_ranks(r, len(cols[0]))
                if free.any() and lw["chunk"]:
                    raise FormatError(f"{int(free.sum())} word(s) without a rank (-1)",
                                      expected=f"a τ-only loss profile with attach_null='free', not {cfg.loss!r}")
            except FormatError as e:
                raise e.at(line=k + 1) from None
            if len(s) == 0 or len(s) > cfg.max_len:
                skipped += 1
                continue
            data.append((k, s, dense, free))
        return data, skipped

    # -- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to directory ``path``: ``model.json`` (config, training state, history) and
        ``weights.npz`` (non-zero entries of ``v``, and of the averaging sum ``u`` when ``average`` is on).
        Both files are written atomically; a loaded model predicts the same orders and can train on."""
        from xlpe.io.atomic import atomic_write

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for name, vec in (("v", self._v), ("u", self._u)):
            if vec is not None:
                nz = np.flatnonzero(vec)
                arrays[f"{name}_index"] = nz.astype(np.int64)
                arrays[f"{name}_value"] = vec[nz]
        with atomic_write(path / "weights.npz", "wb") as fh:
            np.savez_compressed(fh, **arrays)
        meta = {"format": "xlpe-btg", "version": FORMAT_VERSION, "config": self.config.to_dict(),
                "alpha": self._alpha, "t": self._t, "v_sq": self._v_sq, "A": self._A, "steps": self._steps,
                "history": self.history}
        with atomic_write(path / "model.json") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BTGPreorderer":
        """Read a model written by :meth:`save`."""
        path = Path(path)
        try:
            meta = json.loads((path / "model.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FormatError("no model.json in the model directory", path,
                              expected="a directory written by BTGPreorderer.save") from None
        except NotADirectoryError:
            raise FormatError("is a file, not a model directory", path,
                              expected="a directory written by BTGPreorderer.save") from None
        except UnicodeDecodeError:
            raise FormatError("model.json is not UTF-8 text", path / "model.json") from None
        except json.JSONDecodeError as e:
            raise FormatError(f"model.json is not valid JSON ({e})", path / "model.json") from None
        if meta.get("format") != "xlpe-btg" or meta.get("version") != FORMAT_VERSION:
            raise FormatError("not an xlpe BTG model (or an unknown version)", path / "model.json",
                              expected=f"format 'xlpe-btg' version {FORMAT_VERSION}")
        m = cls(BTGConfig.from_dict(meta["config"]))
        try:
            with np.load(path / "weights.npz") as z:
                for name in ("v", "u"):
                    vec = getattr(m, f"_{name}")
                    if vec is None:
                        continue
                    idx, val = z[f"{name}_index"], z[f"{name}_value"]
                    if len(idx) and (idx.min() < 0 or idx.max() >= len(vec)):
                        raise FormatError("weight index out of range for hash_bits", path / "weights.npz")
                    vec[idx] = val
        except (OSError, KeyError, ValueError) as e:
            raise FormatError(f"cannot read the weights ({e})", path / "weights.npz") from None
        m._alpha, m._t, m._v_sq = float(meta["alpha"]), int(meta["t"]), float(meta["v_sq"])
        m._A, m._steps = float(meta["A"]), int(meta["steps"])
        m.history = list(meta.get("history", []))
        return m

