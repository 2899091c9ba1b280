"""The experiment engine: typed stage inputs and the one cache-key convention (:mod:`.keys`)."""
