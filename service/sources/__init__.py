"""Where records come from: the Kafka consumer loop, the embedded demo cluster."""
