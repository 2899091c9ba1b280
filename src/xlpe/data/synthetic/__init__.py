"""Built-in synthetic language pairs: an English-like SVO source translated into one of several target word
orders (``sov``, ``v2``, ``svo-flip``, ``identity``), with gold word alignments, dependency trees (CoNLL-U) and
gold orders. The generator is described in ``docs/synthetic.md``.

Modules: ``config`` (options and profiles), ``lexicon`` (invented words and their translations), ``grammar``
(sentences, trees, translation, alignments), ``generate`` (streams per split, files). The command line is
``xlpe synth`` (:mod:`xlpe.cli.synth`).
"""

from xlpe.data.synthetic.config import (FILE_KINDS, PROFILES, SPLIT_ORDER, SyntheticConfig, SyntheticPair,
                                        load_config)
from xlpe.data.synthetic.generate import generate, gold_order, lexicon, synth
from xlpe.data.synthetic.lexicon import Lexicon

__all__ = ["FILE_KINDS", "Lexicon", "PROFILES", "SPLIT_ORDER", "SyntheticConfig", "SyntheticPair", "generate",
           "gold_order", "lexicon", "load_config", "synth"]
