"""A ``--config`` file of ``ember.cli``, read as data: the one file a command line reads.

:func:`read_config` takes the path given to ``--config`` and returns the mapping of options it
holds, or raises ``ValueError`` naming the file and what is wrong with it. The file is read
only if it is

* a regular file (a link to one is fine): a FIFO would block the read, a device such as
  ``/dev/zero`` never ends, and neither is ever read (a FIFO is not even opened for reading
  that waits);
* at most :data:`MAX_BYTES` long: a config holds options, not data sets, so a huge file is
  refused from its size, before a byte is read;
* UTF-8 text;
* YAML whose aliases (``*name``) repeat at most :data:`MAX_ALIAS_NODES` nodes in all and whose
  nesting is at most :data:`MAX_DEPTH` deep: a 1 KB file of nested aliases (a "billion laughs")
  stands for billions of values, and every pass over them later would run for hours;
* with at most :data:`MAX_OPTION_VALUES` values in each option: jsonargparse checks each item
  of a list with a copy of the whole list, a time that grows with the square of its length.

It is read with YAML's safe loader: no tag builds a Python object, and, as jsonargparse reads
YAML, ``1e-3`` is a float and a date stays text. Whether the options it names exist and have
the right types is jsonargparse's check, afterwards; what a value of an annotation may be is
``_experiment_cli.py``'s (data only: nothing is imported or called because a config names it).
"""

from __future__ import annotations

import os
import re
import stat
from functools import cache
from typing import TYPE_CHECKING, Any

from ember.train._checkpoint.export import kind_of

if TYPE_CHECKING:
    from yaml import Node, SafeLoader

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_OPTION_VALUES",
    "check_value",
    "dump_config",
    "read_config",
]

MAX_BYTES = 4 * 1024 * 1024
"""The largest ``--config`` file read (4 MiB): a config of a few thousand options is well under."""

MAX_ALIAS_NODES = 10_000
"""How many nodes (values, keys, lists, mappings) the aliases of a file may repeat in all."""

MAX_DEPTH = 100
"""How deep lists and mappings may nest in a file (a deeper one would exhaust Python's stack
wherever the values are walked)."""

MAX_OPTION_VALUES = 2_000
"""How many values one option may hold, nested lists and mappings included (their items, keys
and values, aliases repeated). jsonargparse checks each item of a list against a copy of the
whole list: a list of 2,000 numbers takes it ~2 s on a 2-core machine, one of 8,000 ~40 s, one
of the 500,000 a 4 MiB file holds days. Options are settings; data goes in a file of its own,
whose path is the option."""


def read_config(path: str) -> dict[str, Any]:
    """The options the ``--config`` file ``path`` holds; ValueError naming it otherwise (see the
    module doc). An empty file holds none."""
    import yaml

    text = _text(path)
    try:
        loaded = _load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"--config {path} is not valid YAML: {error}") from None
    except ValueError as error:
        raise ValueError(f"--config {path}: {error}") from None
    except RecursionError:  # Python's own YAML parser, without libyaml, recurses per level
        raise ValueError(f"--config {path}: values nest more than {MAX_DEPTH} deep") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(
            f"--config {path} holds a {type(loaded).__name__}, not options: a config file is a "
            "mapping of option names to values (epochs: 3)"
        )
    return loaded


def _text(path: str) -> str:
    """The text of the regular file ``path``, at most :data:`MAX_BYTES` of UTF-8."""
    try:
        info = os.stat(path)  # links followed: a link to a regular file is that file
    except OSError as error:
        raise ValueError(f"--config {path} cannot be read: {error.strerror}") from None
    _check_regular(path, info)
    try:
        # non-blocking: if a FIFO took the file's place since the stat, opening it returns at once
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ValueError(f"--config {path} cannot be read: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        _check_regular(path, os.fstat(file.fileno()))  # what was opened, not what was named
        data = file.read(MAX_BYTES + 1)  # a file that grew since its stat is refused too
    if len(data) > MAX_BYTES:
        raise ValueError(_too_large(path, len(data)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"--config {path} is not UTF-8 text (byte {error.start} is {data[error.start]:#04x}): "
            "save it as UTF-8"
        ) from None


def _check_regular(path: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"--config {path} is {kind_of(info.st_mode)}, not a regular file: refused, a config "
            "is a YAML file (a FIFO or a device is never read)"
        )
    if info.st_size > MAX_BYTES:
        raise ValueError(_too_large(path, info.st_size))


def _too_large(path: str, size: int) -> str:
    return (
        f"--config {path} is {size} bytes, more than the {MAX_BYTES} bytes (4 MiB) a config "
        "file may hold: refused, unread (a config holds options; read data in main)"
    )


def _load(text: str) -> Any:
    """``text`` as YAML, refusing (ValueError) aliases that repeat too much and deep nesting
    before anything is built from it."""
    loader = _loader()(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_size(root)
        from yaml import MappingNode

        if isinstance(root, MappingNode):
            for key, value in root.value:
                _check_option_size(value, f"the option {key.value!r} ({_where(key)})")
        return loader.construct_document(root)
    finally:
        loader.dispose()


def check_value(text: str) -> None:
    """ValueError if the YAML ``text`` (an option's value on the command line) has aliases that
    repeat too much, nests too deep or holds too many values, as a file's option may not; text
    that is not YAML passes (what it must be is jsonargparse's check)."""
    import yaml

    loader = _loader()(text)
    try:
        root = loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        return  # not YAML, or too deep for Python's parser: its reader refuses it
    finally:
        loader.dispose()
    if root is not None:
        _check_size(root)
        _check_option_size(root, "it")


def _check_size(root: Node) -> None:
    """ValueError if the aliases under ``root`` repeat more than :data:`MAX_ALIAS_NODES` nodes,
    refer to a mapping or list they are inside of, or the nesting is deeper than
    :data:`MAX_DEPTH`. A walk over the distinct nodes (an alias is the node it names, met
    again), with a stack of its own: the counts can be astronomic, the walk never is."""
    expanded: dict[int, int] = {}  # id of a node -> the nodes it stands for, aliases repeated
    inside: set[int] = set()  # the nodes being walked, root to here
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            inside.discard(id(node))
            expanded[id(node)] = 1 + sum(expanded[id(child)] for child in _children(node))
            continue
        if id(node) in inside:
            raise ValueError(f"an alias refers to a value it is inside of ({_where(node)})")
        if id(node) in expanded:
            continue
        if len(inside) >= MAX_DEPTH:
            raise ValueError(f"values nest more than {MAX_DEPTH} deep ({_where(node)})")
        inside.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    repeated = expanded[id(root)] - len(expanded)
    if repeated > MAX_ALIAS_NODES:
        raise ValueError(
            f"its aliases repeat {repeated} values, more than the {MAX_ALIAS_NODES} allowed (a "
            "'billion laughs'): refused, write the values out"
        )


def _check_option_size(node: Node, what: str) -> None:
    """ValueError if ``node`` stands for more than :data:`MAX_OPTION_VALUES` values (aliases
    repeated). Walked after :func:`_check_size`, so its aliases are bounded and it is shallow."""
    count, stack = 0, list(_children(node))
    while stack:
        count += 1
        if count > MAX_OPTION_VALUES:
            raise ValueError(
                f"{what} holds more than the {MAX_OPTION_VALUES} values an option may hold "
                "(list items, keys and values, nested ones included): a config gives "
                "settings, not data; put long lists in a file of their own and give its path"
            )
        stack.extend(_children(stack.pop()))


def _children(node: Node) -> list[Node]:
    from yaml import MappingNode, SequenceNode

    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _where(node: Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


def dump_config(values: Any) -> str:
    """``values`` (JSON-like) as YAML that :func:`read_config` reads back as they are: a string
    that the loader would read as a number (``1e5``, ``0E0``) is quoted."""
    import yaml

    text: str = yaml.dump(values, Dumper=_dumper(), allow_unicode=True, sort_keys=False)
    return text


@cache
def _dumper() -> type[Any]:
    """YAML's safe dumper, with the loader's resolvers: what the loader would read as another
    type is written quoted."""
    import yaml

    class DataDumper(yaml.SafeDumper):  # type: ignore[misc]  # yaml has no type hints here
        pass

    DataDumper.yaml_implicit_resolvers = dict(_loader().yaml_implicit_resolvers)
    return DataDumper


@cache
def _loader() -> type[SafeLoader]:
    """YAML's safe loader (libyaml's when installed), reading numbers and dates as jsonargparse
    does, so that a file means what it meant before: ``1e-3`` is a float (YAML 1.1 wants a dot,
    ``1.0e-3``), ``2024-01-01`` is text, not a date."""
    import yaml

    base: type[SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class DataLoader(base):  # type: ignore[misc]  # base is chosen at run time
        pass

    DataLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    DataLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return DataLoader
