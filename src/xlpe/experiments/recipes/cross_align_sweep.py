"""The dev sweeps of ``xlpe experiment cross-align`` and the choices made on them: every extraction of a model (mutual
argmax and softmax at each τ, each join of ``experiment.symmetrize``, on each state of ``experiment.word_vectors``)
scored on the dev set at every layer, the grids' JSON form, and the best extraction of a menu as a
:class:`DevChoice` (:mod:`.cross_align` makes its choices with them).

A grid is ``{layer: {sweep key: AER statistics}}``; a sweep key (:func:`sweep_key`) is the short form of an
extraction that the grids, ``results.json`` and the links' cache keys use: ``"argmax"`` or a softmax τ (a float)
for the paper's join on piece states, ``"<base>|<join>"`` for a word-level join and
``"<base>|<join>|<states>"`` on mean word states. It leaves out the null sink (mutual argmax never has one, softmax
takes the model's) and the layer; :func:`key_extraction` puts them back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xlpe.align.crossalign_extract import Extraction, extract_many
from xlpe.evaluate.significance import aer_score, aer_stats
from xlpe.io.alignments import Alignment


@dataclass(frozen=True)
class DevChoice:
    """An extraction chosen on the dev set (its ``layer`` set) and its dev AER (a fraction)."""

    extraction: Extraction
    aer: float


@dataclass(frozen=True)
class ModelChoices:
    """What the dev sweep of one trained model chose: ``label``, softmax at c with the best τ, the paper's join on
    piece states (the τ of the SSA labels it gives); ``joined``, softmax at c with the best τ and join of
    ``experiment.symmetrize`` on piece states (a further round's labels with ``experiment.round_labels = "dev"``);
    ``best``, the best of ``experiment.trained_extractors`` at c or at every layer (its links' extraction)."""

    label: DevChoice
    joined: DevChoice
    best: DevChoice


@dataclass
class DevChoices:
    """Every choice a recipe run made on the dev set: the untrained encoder's two extractions (mutual argmax and
    softmax) and with them the architecture ``m``, ``n``; each trained model's :class:`ModelChoices` in the order
    they were made; the extraction each trained stage's links use."""

    m: int = 0
    n: int = 0
    untrained_argmax: DevChoice | None = None
    untrained_softmax: DevChoice | None = None
    models: dict[str, ModelChoices] = field(default_factory=dict)
    links: dict[str, Extraction] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The choices as ``results.json`` records them: flat, with sweep keys for extractions."""
        out: dict[str, Any] = {}
        if self.untrained_argmax is not None:
            a, s = self.untrained_argmax.extraction, self.untrained_softmax.extraction
            out.update({"untrained_argmax_layer": a.layer, "untrained_softmax_layer": s.layer,
                        "untrained_softmax_threshold": s.threshold, "untrained_softmax_symmetrize": s.symmetrize,
                        "untrained_argmax_symmetrize": a.symmetrize, "m": self.m, "n": self.n,
                        "untrained_argmax_vectors": a.word_vectors, "untrained_softmax_vectors": s.word_vectors,
                        "dev_untrained_argmax_aer": self.untrained_argmax.aer,
                        "dev_untrained_softmax_aer": self.untrained_softmax.aer})
        for name, c in self.models.items():
            out.update({f"{name}_joined": sweep_key(c.joined.extraction),
                        f"{name}_threshold": c.label.extraction.threshold,
                        f"{name}_extractor": sweep_key(c.best.extraction), f"dev_{name}_aer": c.best.aer,
                        f"{name}_layer": c.best.extraction.layer})
        out.update({f"{stage}_extraction": sweep_key(ext) for stage, ext in self.links.items()})
        return out


def sweep_key(ext: Extraction):
    """The sweep key of an extraction (module docstring)."""
    base = "argmax" if ext.method == "argmax" else ext.threshold
    if ext.word_vectors != "pieces":
        return f"{base}|{ext.symmetrize}|{ext.word_vectors}"
    return base if ext.symmetrize == "pieces" else f"{base}|{ext.symmetrize}"


def key_extraction(key, *, null_sink: str, layer: int | None = None) -> Extraction:
    """The extraction of a sweep key: mutual argmax without a null sink, softmax with the model's ``null_sink``."""
    parts = key.split("|") if isinstance(key, str) else [key]
    base, sym, vec = parts + ["pieces"] * (3 - len(parts))
    return _extraction(base if base == "argmax" else float(base), null_sink, sym, vec, layer)


def _extraction(base, null_sink: str, symmetrize: str, word_vectors: str, layer: int | None = None) -> Extraction:
    if base == "argmax":
        return Extraction(method="argmax", null_sink="none", symmetrize=symmetrize, word_vectors=word_vectors,
                          layer=layer)
    return Extraction(threshold=base, null_sink=null_sink, symmetrize=symmetrize, word_vectors=word_vectors,
                      layer=layer)


def menu(bases: list, null_sink: str, symmetrize: list[str] = ("pieces",),
         word_vectors: list[str] = ("pieces",)) -> list[Extraction]:
    """The extractions of ``bases`` (``"argmax"`` or softmax τ) joined by each of ``symmetrize`` on each of
    ``word_vectors``, in that nesting (the order that breaks ties in :func:`best`)."""
    return [_extraction(b, null_sink, sym, vec) for vec in word_vectors for sym in symmetrize for b in bases]


def sweep_menu(thresholds: list[float], null_sink: str, symmetrize: list[str] = ("pieces",),
               word_vectors: list[str] = ("pieces",)) -> list[Extraction]:
    """What a dev sweep scores: mutual argmax and softmax at every τ, each joined by the paper's way and every
    one of ``symmetrize``, on each of ``word_vectors``."""
    return menu(["argmax"] + list(thresholds), null_sink, list(dict.fromkeys(["pieces", *symmetrize])), word_vectors)


def sweep(aligner, src: list[str], tgt: list[str], gold: list, *, layers: list[int], extractions: list[Extraction],
          batch_size: int = 32) -> dict:
    """AER of each of ``extractions`` at every one of ``layers`` (their own ``layer`` is not read), from one
    forward pass per batch and layer (:func:`~xlpe.align.crossalign_extract.extract_many`). Returns
    ``{layer: {sweep key: stats}}`` with per-sentence :func:`aer_stats` summed."""
    keys = [sweep_key(x) for x in extractions]
    out = {lay: {k: np.zeros(4) for k in keys} for lay in layers}
    for k in range(0, len(src), batch_size):
        batch = aligner.encode([s.split(" ") for s in src[k:k + batch_size]],
                               [t.split(" ") for t in tgt[k:k + batch_size]], first_line=k + 1)
        g = gold[k:k + batch_size]
        for lay in layers:
            for key, words in zip(keys, extract_many(*aligner.states(batch, lay), extractions)):
                hyps = [Alignment.from_links((x[0], x[1]) for x in links) for links in words]
                out[lay][key] += aer_stats(hyps, g).sum(0)
    return out


def best(grid: dict, extractions: list[Extraction], layers: list[int] | None = None) -> DevChoice:
    """The extraction of ``extractions`` with the lowest AER in ``grid`` at any of ``layers`` (default: all), its
    layer set (ties: the earlier layer, then the earlier extraction)."""
    found = None
    for lay in layers or sorted(grid):
        for ext in extractions:
            a = aer_score(np.asarray(grid[lay][sweep_key(ext)]))
            if found is None or a < found[2] - 1e-12:
                found = (lay, ext, a)
    return DevChoice(dataclasses.replace(found[1], layer=found[0]), found[2])


def grid_to_json(grid: dict) -> dict:
    return {str(lay): {str(k): [float(x) for x in v] for k, v in row.items()} for lay, row in grid.items()}


def grid_from_json(doc: dict) -> dict[int, dict[Any, np.ndarray]]:
    return {int(lay): {(k if k == "argmax" or "|" in k else float(k)): np.asarray(v) for k, v in row.items()}
            for lay, row in doc.items()}
