"""ember's version: the one source (the package metadata is built from it, see pyproject.toml)."""

__all__ = ["__version__"]

__version__ = "0.2.0"
