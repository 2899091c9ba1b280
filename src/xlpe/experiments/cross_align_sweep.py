"""The dev sweeps of ``xlpe experiment cross-align``: every extraction of a model (mutual argmax and softmax at each τ,
each join of ``experiment.symmetrize``, on each state of ``experiment.word_vectors``) scored on the dev set at every
layer, the grids' JSON form and the best entry of a grid (:mod:`.cross_align` makes its choices with them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlpe.evaluate.significance import aer_score, aer_stats
from xlpe.experiments.cross_align_report import ext_key


def sweep(aligner, src: list[str], tgt: list[str], gold: list, *, layers: list[int], thresholds: list[float],
          null_sink: str, batch_size: int = 32, symmetrize: list[str] = ("pieces",),
          word_vectors: list[str] = ("pieces",)) -> dict:
    """AER of mutual argmax and of softmax at every τ, each joined by every ``symmetrize`` way, on each of
    ``word_vectors`` (piece states, or each word's pieces' mean), at every layer, from one forward pass per batch and
    layer. Returns ``{layer: {key: stats}}`` (keys: :func:`ext_key`) with
    per-sentence :func:`aer_stats` summed."""
    import torch

    from xlpe.align.crossalign_extract import directional_links, symmetrized_word_links, word_links, word_states
    from xlpe.io.alignments import Alignment

    symmetrize = list(dict.fromkeys(["pieces", *symmetrize]))    # the paper's always: SSA labels, Figure 5
    keys = menu(["argmax"] + list(thresholds), symmetrize, word_vectors)
    out = {lay: {k: np.zeros(4) for k in keys} for lay in layers}
    for k in range(0, len(src), batch_size):
        batch = aligner.encode([s.split(" ") for s in src[k:k + batch_size]],
                               [t.split(" ") for t in tgt[k:k + batch_size]], first_line=k + 1)
        g = gold[k:k + batch_size]
        with torch.inference_mode():
            for lay in layers:
                hs, ht = aligner.hidden_states(batch, lay)
                sw, tw = batch.words[:batch.size].to(hs.device), batch.words[batch.size:].to(hs.device)
                states = {"pieces": (hs.float(), ht.float(), sw, tw)}
                if "mean" in word_vectors:
                    (ws, wsw), (wt, wtw) = word_states(hs, sw), word_states(ht, tw)
                    states["mean"] = (ws, wt, wsw, wtw)
                for vec in word_vectors:
                    a, b, aw, bw = states[vec]
                    for base in ["argmax"] + list(thresholds):
                        method = "argmax" if base == "argmax" else "softmax"
                        fwd, bwd = directional_links(a, b, aw, bw, method=method,
                                                     threshold=0.0 if base == "argmax" else base,
                                                     null_sink="none" if base == "argmax" else null_sink)
                        for sym in symmetrize:
                            words = (word_links(fwd & bwd, aw, bw) if sym == "pieces"
                                     else symmetrized_word_links(fwd, bwd, aw, bw, sym))
                            hyps = [Alignment.from_links((x[0], x[1]) for x in links) for links in words]
                            out[lay][ext_key(base, sym, vec)] += aer_stats(hyps, g).sum(0)
    return out


def best(grid: dict, layers: list[int] | None = None, keys: list | None = None) -> tuple[int, Any, float]:
    """``(layer, key, AER)`` with the lowest AER (ties: the earlier layer, then the earlier key)."""
    best = None
    for lay in layers or sorted(grid):
        for key in keys or list(grid[lay]):
            a = aer_score(np.asarray(grid[lay][key]))
            if best is None or a < best[2] - 1e-12:
                best = (lay, key, a)
    return best


def grid_to_json(grid: dict) -> dict:
    return {str(lay): {str(k): [float(x) for x in v] for k, v in row.items()} for lay, row in grid.items()}


def grid_from_json(doc: dict) -> dict:
    return {int(lay): {(k if k == "argmax" or "|" in k else float(k)): np.asarray(v) for k, v in row.items()}
            for lay, row in doc.items()}


def menu(bases: list, symmetrize: list[str], word_vectors: list[str] = ("pieces",)) -> list:
    return [ext_key(b, sym, vec) for vec in word_vectors for sym in symmetrize for b in bases]
