"""Metric loggers: files on disk (the default), memory, one CSV file, TensorBoard."""
