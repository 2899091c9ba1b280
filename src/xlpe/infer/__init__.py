"""Decoding with trained models: greedy and batched beam search, teacher-forced attention (``beam``)."""

from xlpe.infer.beam import Hypothesis, beam_search, force_decode, greedy, length_penalty

__all__ = ["Hypothesis", "beam_search", "force_decode", "greedy", "length_penalty"]
