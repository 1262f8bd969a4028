"""Distributed data parallel on ``torch.distributed``: the strategy and the pieces it assembles."""
