"""A generic labelled univariate corpus for developing `replay --csv`, scored NAB-style (issue 16 item 5)."""
