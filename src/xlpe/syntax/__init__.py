"""Syntax: dependency trees -> structural positions (``trees``), trees as channel sources (``source``)."""

from xlpe.syntax.trees import depths, relative_positions, tree_relative, word_channels

__all__ = ["depths", "relative_positions", "tree_relative", "word_channels"]
