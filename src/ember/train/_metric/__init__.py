"""Metrics: the metric protocols, the built-in metrics, the event store they are logged through."""
