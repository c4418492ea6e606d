"""Partition state that outlives a process: snapshots, the changelog store, rebalance handoff."""
