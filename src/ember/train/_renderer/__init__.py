"""Renderers: how training is shown to a person (the CLI lines, the full-screen TUI)."""
