"""The BTG preorderer as a channel source: ``pos_XL`` of every sentence predicted on the fly from the source
words alone (SPEC §4.1: at test time the trained BTG model reorders the source), for training and decoding."""

from __future__ import annotations

import os
from typing import Sequence

from xlpe.data.channels import ChannelSource
from xlpe.errors import ConfigError
from xlpe.io.orders import invert_order


class PreordererSource(ChannelSource):
    """Channel ``xl`` from a trained :class:`xlpe.reorder.btg.BTGPreorderer` (a directory or the object)."""

    level = "word"

    def __init__(self, model, processes: int = 1):
        from xlpe.reorder.btg import BTGPreorderer

        if isinstance(model, (str, os.PathLike)):
            self.description = f"the BTG preorderer {os.fspath(model)}"
            model = BTGPreorderer.load(model)
        else:
            self.description = "the BTG preorderer"
        if model.config.factors > 1:
            raise ConfigError(f"{self.description} reads {model.config.factors} factor columns per token, which "
                              "plain input lines do not have; run `xlpe preorder apply` on factored input and "
                              "pass its output as an orders file")
        self.model, self.processes = model, processes

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        return [invert_order(o) for o in self.model.predict_many(sentences, self.processes)]
