"""`prexid bench` targets: throughput measured as a ratio against a baseline timed in the same run."""
