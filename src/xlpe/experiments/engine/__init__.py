"""The experiment engine: what every recipe is made of.

- :mod:`.recipe`: the config every recipe extends (``[data]``, ``[experiment]``, ``[model]``, ``[train]``, each key
  checked when it is loaded) and the one writer of ``report.md`` / ``results.json``;
- :mod:`.stages`: the shared stages (built-in data, data, subwords, eflomal, the BTG preorderer, parsing, DPE
  targets), each with its declared inputs;
- :mod:`.runs`: the typed NMT run (a :class:`~.runs.System` of a table, the :class:`~.runs.Corpus`, the
  :class:`~.runs.Evaluation`, what a grid shares: :class:`~.runs.Shared`), the grid of systems x seeds, the training and
  decoding cost;
- :mod:`.cache`: stages cached and resumable under a lock, keyed by their declared inputs (the key rule:
  :mod:`xlpe.keys`);
- :mod:`.reuse`, :mod:`.archive`, :mod:`.status`: runs taken from other folders, folders archived and restored,
  a folder's progress; :mod:`.summary`: the seed-aware summaries reports print.

The engine never imports a recipe (:mod:`xlpe.experiments.recipes`); the import contract in pyproject.toml says so.
"""
