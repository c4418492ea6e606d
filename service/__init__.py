"""prexid's I/O side: settings, decoders, the pipeline loop, Kafka, HTTP, sinks and the CLI."""
