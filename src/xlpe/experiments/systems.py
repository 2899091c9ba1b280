"""The one table of systems every recipe and the demo compare: a name -> its source position encodings.

``baseline`` and ``ape`` are the same system (the recipes call it ``baseline``, the demo ``ape``); encodings can
also be joined ad hoc with ``+`` (``ape+rpe``). Encoder-free systems (Ding et al. Table 4) use the same names
with ``encoder_free=True``; encodings with relative terms are not defined there (SPEC §4.7).
"""

from __future__ import annotations

from xlpe.errors import ConfigError

SYSTEMS: dict[str, list[str]] = {
    "none": ["none"],
    "baseline": ["ape"],
    "ape": ["ape"],
    "rpe": ["ape", "rpe"],
    "xl": ["xl"],
    "inxl": ["inxl"],
    "headxl": ["ape", "headxl"],
    "combination": ["ape", "combination"],
    "struct": ["ape", "struct_abs", "struct_rel"],             # Wang et al. Table 1 "+abs-stru +rel-stru"
}

LABELS: dict[str, str] = {"none": "no PE", "baseline": "baseline (APE)", "ape": "APE", "rpe": "+RPE",
                          "xl": "XL PE only", "inxl": "+InXL", "headxl": "+HeadXL", "combination": "+Combination",
                          "struct": "+Struct PE (abs + rel)"}

#: systems defined for the encoder-free model (no relative terms without encoder self-attention, SPEC §4.7)
ENCODER_FREE = ("none", "ape", "xl", "inxl", "headxl", "combination")


def pe_list(name: str) -> list[str]:
    """The encodings of system ``name`` (a name of :data:`SYSTEMS` or encodings joined with ``+``)."""
    if name in SYSTEMS:
        return list(SYSTEMS[name])
    from xlpe.nn.positions import ENCODINGS
    parts = name.split("+")
    unknown = [p for p in parts if p not in ENCODINGS]
    if unknown:
        raise ConfigError(f"unknown system {name!r}: systems are {', '.join(SYSTEMS)}, or encodings joined with "
                          f"'+' ({', '.join(ENCODINGS)})")
    return parts
