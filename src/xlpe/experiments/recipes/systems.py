"""The one table of systems every recipe and the demo compare: a name -> its source position encodings.

``baseline`` and ``ape`` are the same system (the recipes call it ``baseline``, the demo ``ape``); encodings can
also be joined ad hoc with ``+`` (``ape+rpe``). A name of this table comes first: ``rpe+headxl`` is the +RPE
system with HeadXL (APE, RPE, HeadXL), not the encodings ``rpe`` and ``headxl`` alone. Encoder-free systems (Ding
et al. Table 4) use the same names with ``encoder_free=True``; encodings with relative terms are not defined there
(SPEC §4.7).
"""

from __future__ import annotations

from xlpe.errors import ConfigError

SYSTEMS: dict[str, list[str]] = {
    "none": ["none"],
    "baseline": ["ape"],
    "ape": ["ape"],
    "learned": ["learned"],
    "rpe": ["ape", "rpe"],
    "disan": ["ape", "disan"],                                  # Ding et al. Table 1 "+ DiSAN"
    "xl": ["xl"],
    "inxl": ["inxl"],
    "headxl": ["ape", "headxl"],
    "combination": ["ape", "combination"],
    "struct": ["ape", "struct_abs", "struct_rel"],             # Wang et al. Table 1 "+abs-stru +rel-stru"
    "dpe": ["dpe"],                                             # Zheng et al. (trained with alignment targets)
    # Wang et al. Table 1, the structural ablation (``xlpe experiment structural-pe``)
    "abs-stru": ["struct_abs"],
    "rel-stru": ["struct_rel"],
    "abs-seq": ["ape"],
    "abs-seq+abs-stru": ["ape", "struct_abs"],
    "abs-seq+both-stru": ["ape", "struct_abs", "struct_rel"],
    "rel-seq": ["ape", "rpe"],
    "rel-seq+abs-stru": ["ape", "rpe", "struct_abs"],
    "rel-seq+both-stru": ["ape", "rpe", "struct_abs", "struct_rel"],
    # structural PE composed with XL PE (in none of the papers)
    "headxl+both-stru": ["ape", "headxl", "struct_abs", "struct_rel"],
    "combination+both-stru": ["ape", "combination", "struct_abs", "struct_rel"],
    "inxl+both-stru": ["inxl", "struct_abs", "struct_rel"],
    # the compositions of ``xlpe experiment compare`` (system names joined: +RPE with +HeadXL, ...)
    "rpe+struct": ["ape", "rpe", "struct_abs", "struct_rel"],
    "headxl+struct": ["ape", "headxl", "struct_abs", "struct_rel"],
    "rpe+headxl": ["ape", "rpe", "headxl"],
}

LABELS: dict[str, str] = {"none": "no PE", "baseline": "baseline (APE)", "ape": "APE", "rpe": "+RPE",
                          "learned": "learned PE", "disan": "+DiSAN", "rpe+struct": "+RPE +Struct PE",
                          "headxl+struct": "+HeadXL +Struct PE", "rpe+headxl": "+RPE +HeadXL",
                          "xl": "XL PE only", "inxl": "+InXL", "headxl": "+HeadXL", "combination": "+Combination",
                          "struct": "+Struct PE (abs + rel)", "dpe": "DPE", "abs-stru": "abs-stru only",
                          "rel-stru": "rel-stru only",
                          "abs-seq": "abs-seq (baseline)", "abs-seq+abs-stru": "abs-seq +abs-stru",
                          "abs-seq+both-stru": "abs-seq +abs-stru +rel-stru", "rel-seq": "abs+rel-seq",
                          "rel-seq+abs-stru": "abs+rel-seq +abs-stru",
                          "rel-seq+both-stru": "abs+rel-seq +abs-stru +rel-stru",
                          "headxl+both-stru": "+HeadXL +abs-stru +rel-stru",
                          "combination+both-stru": "+Combination +abs-stru +rel-stru",
                          "inxl+both-stru": "+InXL +abs-stru +rel-stru"}

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
