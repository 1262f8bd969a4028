"""Checkpoints: records, atomic verified files, manifests, strategies, the learning checkpointer.

Files are safetensors plus JSON only: loading a checkpoint never runs code (``docs/design.md``).
"""
