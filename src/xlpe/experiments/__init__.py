"""Recipes: the demo (main job) and the experiments that reproduce each paper's tables at small scale."""
