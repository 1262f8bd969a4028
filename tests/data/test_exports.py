"""Tests for ember.data's public surface and import behaviour."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import ember.data

EXPECTED = {
    "BatchDataLoader",
    "BatchFn",
    "Batcher",
    "ComposedDataset",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "DataLoaderIterator",
    "Dataset",
    "DeviceLike",
    "InMemDataset",
    "MapperDataset",
    "MultiThreadDataLoader",
    "PartialDataset",
    "Progress",
    "SamplerDataset",
    "ShardedDataLoader",
    "ShuffledDataset",
    "StatefulSource",
    "StreamingDataLoader",
    "TorchDataLoader",
    "WindowsDataset",
    "move_to_device",
}


def test_exported_names_are_pinned() -> None:
    """ember.data exports exactly the documented names, and each one exists."""
    assert set(ember.data.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(ember.data, name) is not None


def test_every_module_declares_its_public_names() -> None:
    """Each module of ember.data has __all__, and every listed name is defined."""
    for module_info in pkgutil.iter_modules(ember.data.__path__, "ember.data."):
        module = importlib.import_module(module_info.name)
        assert isinstance(module.__all__, list), module_info.name
        assert module.__doc__, module_info.name
        for name in module.__all__:
            assert hasattr(module, name), f"{module_info.name}.{name}"


def test_data_modules_never_import_train() -> None:
    """No module of ember.data imports ember.train (the data layer stands alone)."""
    for path in Path(ember.data.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(name.startswith("ember.train") for name in names), path.name


def test_importing_starts_no_thread() -> None:
    """import ember.data has no side effects: no thread is started."""
    code = "import threading, ember.data\nassert threading.active_count() == 1\n"
    subprocess.run([sys.executable, "-c", code], check=True)
