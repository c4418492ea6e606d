"""Seeded GPU-cluster simulator with ground truth: telemetry, kernel logs and failure labels."""
