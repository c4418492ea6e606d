"""Where results go: Kafka alerts and dead letters, Alertmanager, Prometheus, the console."""
