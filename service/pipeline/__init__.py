"""Per-partition processing: decode calls, the series registry, detection, Xid alerts."""
