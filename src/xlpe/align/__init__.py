"""Word alignment: symmetrisation (pure Python) and the eflomal statistical aligner (optional, GPLv3).

``xlpe.align.symmetrize`` has no optional dependency. ``xlpe.align.eflomal`` imports the ``eflomal``
package only when an alignment runs, so importing this package never needs it.
"""

from xlpe.align.symmetrize import METHODS, canonical_method, symmetrize, symmetrize_many

__all__ = ["METHODS", "canonical_method", "symmetrize", "symmetrize_many",
           "EflomalAligner", "AlignResult", "Priors", "align_bitext", "align_files"]

_LAZY = {"EflomalAligner", "AlignResult", "Priors", "align_bitext", "align_files"}


def __getattr__(name):
    # The wrapper module itself imports no GPL code; it is loaded on first use to keep imports light.
    if name in _LAZY:
        from xlpe.align import eflomal as _m
        return getattr(_m, name)
    raise AttributeError(f"module 'xlpe.align' has no attribute {name!r}")
