"""The files a run directory holds: their names, their formats, and how they are read back.

One module per file a run writes (the metric logs and ``steps.jsonl``, ``config.json``,
``summary.json``, ``run-end.json``, the checkpoints' files and manifests, ``metrics.png``), with
the guards every read goes through. The writers in ``ember.train`` and the readers in
``ember.runs`` both stand on it; it imports neither (nor the data layer), only ember's helpers
at the root (``docs/design.md``, "Files").
"""
