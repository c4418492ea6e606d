"""`prexid matrix`: variants x seeds through prexid and the baselines, reported worst case first."""
