"""Wiring and commands: the CLI, settings, the demo, the live state HTTP and feeds share."""
