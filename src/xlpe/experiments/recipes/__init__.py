"""The recipes: the demo (``xlpe demo``) and one per paper (``xlpe experiment NAME``), each a config over the
engine's stages (:mod:`xlpe.experiments.engine`) with its systems, tables and report.

A recipe module provides ``TABLES`` (what ``--only`` may name), ``load_config(path, sets)`` (its config, every key
checked at load) and ``run_experiment(cfg, out, only)``; :data:`RECIPES` names them for ``xlpe experiment``. A new
recipe is a module and one line here (``tests/test_engine.py`` adds a toy one).
"""

from __future__ import annotations

#: recipe name -> (module, one-line help)
RECIPES: dict[str, tuple[str, str]] = {
    "xl-pe": ("xlpe.experiments.recipes.xl_pe", "Ding et al. 2020: Tables 1, 3, 4 and Figures 3, 4 (XL PE, InXL, "
                                                "HeadXL, Combination)"),
    "structural-pe": ("xlpe.experiments.recipes.structural_pe", "Wang et al. 2019: the structural PE ablation "
                                                                "(Table 1), Table 2 analogue and the composition "
                                                                "with XL PE"),
    "dpe": ("xlpe.experiments.recipes.dpe", "Zheng et al.: DPE (Tables 3-5 analogues: DPE vs baseline, the λ sweep, "
                                            "a deeper control), 2PT (Table 2) and DPE against XL PE"),
    "compare": ("xlpe.experiments.recipes.compare", "every source position encoding and the compositions worth "
                                                    "knowing, one pair, one recipe, several seeds: BLEU, chrF, cost"),
    "cross-align": ("xlpe.experiments.recipes.cross_align", "Lai et al. 2022: the Cross-Align aligner against "
                                                            "eflomal and the untrained encoder (Tables 2-3, Figures 3 "
                                                            "and 5), AER on real gold sets"),
}
