"""``ember.errors``: 0.1.0's module, kept until 0.3.0 for old imports.

Each name it had is served from its new home with a ``DeprecationWarning`` naming the import to
write instead, or refused naming the replacement (the table: ``ember/_moved.py``).
"""

from ember._moved import moved_names

__all__: list[str] = []

__getattr__ = moved_names(__name__)
