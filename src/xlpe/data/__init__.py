"""Data: subwords with word maps, batching, and the built-in synthetic language pairs."""
