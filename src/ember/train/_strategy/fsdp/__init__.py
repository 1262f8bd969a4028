"""Fully sharded data parallel (FSDP2): parameters, gradients and optimizer state sharded."""
