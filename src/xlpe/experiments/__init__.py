"""Experiments: the engine (:mod:`.engine`: typed stages, runs and configs) and the recipes over it
(:mod:`.recipes`: the demo and each paper's tables)."""
