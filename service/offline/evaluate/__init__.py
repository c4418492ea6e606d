"""Scoring alerts against ground truth the way SREs judge them, and NAB-style univariate scoring."""
