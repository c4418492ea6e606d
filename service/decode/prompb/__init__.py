"""Prometheus's remote-write protobuf messages (`prometheus.WriteRequest`), generated from its own
`prompb/*.proto` (README.md says which version and how to regenerate)."""
