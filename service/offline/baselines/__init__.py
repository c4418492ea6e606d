"""Baselines prexid is measured against, run over the same replayed data in the same run."""
