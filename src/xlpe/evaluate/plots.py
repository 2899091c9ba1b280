"""Plots written straight to PNG with matplotlib's Agg canvas (no pyplot, no global backend switch, no display).

:func:`attention_heatmap` draws one attention matrix (rows = target tokens, columns = source tokens) with
alignment links on top: reference links as hollow squares (sure) or hollow circles (possible only) and
predicted links as crosses, so hits, misses and false links are visible at a glance (SPEC §4.6).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from xlpe.io.alignments import Alignment
from xlpe.io.atomic import atomic_write

Link = tuple[int, int]


def attention_heatmap(matrix, src_labels: Sequence[str], tgt_labels: Sequence[str], path: str | os.PathLike, *,
                      gold: Alignment | None = None, predicted: Iterable[Link] | None = None,
                      title: str | None = None) -> None:
    """Save a heat map of ``matrix`` ``(len(tgt_labels), len(src_labels))`` to ``path`` (PNG, atomically).

    Args:
        matrix: attention weights, row ``j`` = target token ``j``, column ``i`` = source token ``i``
            (a tensor or an array).
        src_labels, tgt_labels: tick labels of the columns and rows.
        gold: reference links ``(i, j)`` = (source, target), 0-based: sure ones drawn as hollow squares,
            possible-only ones as hollow circles.
        predicted: hypothesis links ``(i, j)``, drawn as crosses.
        title: optional figure title.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix, dtype=np.float64)
    if m.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(f"matrix shape {m.shape} does not match {len(tgt_labels)} target x "
                         f"{len(src_labels)} source labels")
    rows, cols = m.shape
    fig = Figure(figsize=(max(3.0, 0.38 * cols + 1.8), max(2.5, 0.38 * rows + 1.4)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(m, cmap="Greys", vmin=0.0, vmax=max(float(m.max()) if m.size else 1.0, 1e-9),
                   aspect="auto", interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    ax.set_xticks(range(cols))
    ax.set_xticklabels(list(src_labels), rotation=90, fontsize=7)
    ax.set_yticks(range(rows))
    ax.set_yticklabels(list(tgt_labels), fontsize=7)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    handles = []
    if gold is not None:
        for links, marker, label in ((gold.sure, "s", "gold sure"), (gold.possible_only, "o", "gold possible")):
            if links:
                xs, ys = zip(*sorted(links))
                handles.append(ax.scatter(xs, ys, s=70, marker=marker, facecolors="none", edgecolors="tab:blue",
                                          linewidths=1.5, label=label))
    pred = sorted(predicted or ())
    if pred:
        xs, ys = zip(*pred)
        handles.append(ax.scatter(xs, ys, s=30, marker="x", color="tab:red", linewidths=1.5, label="predicted"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=7, frameon=False)
    if title:
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png")
