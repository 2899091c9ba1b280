"""xlpe: word-order-aware neural machine translation.

The layers of the package and the one direction imports run between them: ``[tool.importlinter]`` in pyproject.toml.
"""

__version__ = "0.1.0"
