"""Metrics: BLEU/chrF (sacrebleu), AER, reordering accuracy. Each a small API plus a CLI command."""
