"""xlpe: word-order-aware neural machine translation.

Stages (one folder each) follow the data flow of DESIGN.md:
``io`` (formats) -> ``data`` (subwords, synthetic pairs) -> ``align`` / ``reorder`` / ``syntax``
-> ``nn`` / ``train`` / ``infer`` -> ``evaluate`` -> ``experiments`` and ``cli``.
"""

__version__ = "0.1.0"
