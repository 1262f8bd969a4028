"""``ember.cli(main)``: an experiment's command line and YAML files, read from a typed function.

::

    @dataclass
    class Data:
        batch_size: int = 32
        '''Items per batch.'''

    def main(directory: Path = Path("runs/digits"), lr: float = 3e-3, data: Data = Data()):
        '''Train the digits classifier.

        Args:
            lr: Adam's learning rate.
        '''
        ...                                           # build and launch the training

    if __name__ == "__main__":
        ember.cli(main)

    python train.py --help                            # every option: type, default, doc words
    python train.py --config exp.yaml --lr 0.01 --data.batch_size 64
    python train.py --config exp.yaml --print_config  # the resolved YAML, then exit
    python train.py --config runs/digits/config.yaml  # a run's recorded configuration again

Every parameter of ``main`` is an option: annotated (``int``, ``float``, ``str``, ``bool``,
``Path``, ``Literal[...]``, an ``Enum``, ``X | None``, lists and dicts of them) and with a default,
or required; a dataclass parameter gives dotted options for its fields, nested to any depth
(``--data.batch_size``). The words for an option come from ``main``'s docstring (its ``Args:``)
and the dataclass's (its ``Attributes:`` or a docstring under the field).

Values are resolved in this order: the defaults, the ``--config`` files in the order given
(each overrides the ones before), then every other option on the command line (wherever the
``--config`` options stand among them). A wrong key, a wrong type or a missing required value is
refused before ``main`` runs: the message names the key, the value and what was expected
(the nearest key for a misspelled one), and the exit status is 2, as argparse's.

``main`` then runs with the values, inside ``running_experiment`` (``train/_experiment.py``):
each run it launches records them in ``config.json`` (``"cli"``) and ``config.yaml``.

A config is data, and so is every value (``docs/cli.md``, "What a config file can do"):

* No value imports or calls anything. ``main``'s annotations are checked before anything is
  parsed (:func:`_not_data`): one whose values jsonargparse would build by importing what a
  config names (a callable, a ``type[...]``, a class that is not a plain dataclass, which
  jsonargparse builds from ``class_path``/``init_args``) is refused with a TypeError naming the
  parameter and what to write instead. ``Any`` and ``object``, alone or in lists and dicts
  (``dict[str, Any]``), take JSON-like data as written: a mapping with a ``class_path`` key is
  a mapping. Behind that, while jsonargparse parses, its import-path policy denies every path a
  value names but those of ``main``'s own dataclasses (:func:`_values_are_data`).
* Only ``--config`` on the command line reads a file, through ``_config_file.py`` (a regular
  file, at most 4 MiB, UTF-8, YAML with bounded aliases); a ``config:`` key in a file and the
  options jsonargparse gives each dataclass group to read a file (``--data FILE``) are not
  accepted, environment variables are never read, and an option's YAML value on the command
  line has its aliases bounded as a file's.

Built on jsonargparse, the parser under LightningCLI, which brings ``--config``,
``--print_config`` and YAML with it (``docs/cli.md`` says why not tyro). It is the ``ember[cli]``
extra, imported when ``cli`` is called.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import inspect
import json
import re
import secrets
import sys
import types
import typing
from collections import abc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ember._config_file import check_value, dump_config, read_config
from ember.train._checkpoint.rng import seed_everything
from ember.train._experiment import Experiment, running_experiment
from ember.train._options import TrainingOptions

if TYPE_CHECKING:
    from jsonargparse import ArgumentParser, Namespace

__all__ = ["cli"]

T = TypeVar("T")

_CONFIG = "--config"
_CONFIG_HELP = (
    "a YAML file of options; repeat it to layer files (a later file overrides an earlier one); "
    "options given on the command line override every file"
)


def cli(main: Callable[..., T], args: Sequence[str] | None = None) -> T:
    """Run ``main`` with its parameters read from the command line and YAML config files.

    ``args`` replaces ``sys.argv[1:]`` (tests, notebooks: ``ember.cli(main, args=["--lr",
    "0.1"])``); what ``main`` returns is returned. ``--help`` and ``--print_config`` print and
    exit (status 0); a wrong key, type or missing value exits with status 2 before ``main``
    runs. See the module doc for the types, the order of the files and what runs record.
    Needs the ``ember[cli]`` extra.
    """
    parameters = _parameters(main)
    classes = _data_classes(parameters)
    argv = _arguments(args)
    parser = _parser(main, prog=None if args is None else getattr(main, "__name__", None))
    _check_values(parser, argv)
    with _values_are_data(classes):
        # env=False: JSONARGPARSE_DEFAULT_ENV=true would otherwise read options, and files
        # (PROG_CONFIG=FILE), from the environment
        namespace = parser.parse_args(_files_first(argv), env=False)
        seed = _seed(namespace, parameters)
        resolved = json.loads(parser.dump(namespace, format="json", skip_unset=False))
        experiment = Experiment(resolved, dump_config(resolved))  # what --config reads back
        values = parser.instantiate(namespace)
    if seed is not None:  # before main builds the model, as LightningCLI's seed_everything
        seed_everything(seed)
    with running_experiment(experiment):
        return main(**{name: values[name] for name in parameters})


def _seed(namespace: Namespace, parameters: dict[str, Any]) -> int | None:
    """The seed of ``main``'s ``TrainingOptions`` parameter, if it has one: its ``seed``, or
    one drawn now and put into the values, so that every run records it and ``--config
    RUN/config.yaml`` trains the same run."""
    for name, annotation in parameters.items():
        if annotation is TrainingOptions:
            key = f"{name}.seed"
            if namespace[key] is None:
                namespace[key] = secrets.randbelow(2**31)
            seed: int = namespace[key]
            return seed
    return None


def _parameters(main: Callable[..., Any]) -> dict[str, Any]:
    """``main``'s parameters and their annotations, refusing one the command line cannot give."""
    if not callable(main):
        raise TypeError(f"ember.cli needs a function, got {main!r} ({type(main).__name__})")
    annotations: dict[str, Any] = {}
    for name, parameter in _signature(main, "main").parameters.items():
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(
                f"ember.cli cannot give main's parameter {parameter} (*args, **kwargs and "
                "positional-only parameters have no option name): make it a named parameter"
            )
        if parameter.annotation is parameter.empty:
            raise TypeError(
                f"main's parameter {name!r} has no type annotation, so the command line cannot "
                f"tell how to read it: annotate it (e.g. {name}: int = 3)"
            )
        annotations[name] = parameter.annotation
    return annotations


def _signature(function: Callable[..., Any], what: str) -> inspect.Signature:
    """``function``'s signature with its annotations evaluated (``from __future__ import
    annotations`` makes them text): what is checked is what jsonargparse will read."""
    try:
        return inspect.signature(function, eval_str=True)
    except _UNEVALUABLE as error:
        raise _unevaluable(what, error) from error


_UNEVALUABLE = (NameError, AttributeError, SyntaxError, TypeError)
"""What evaluating an annotation written as text raises when a name it uses is not there."""


def _unevaluable(what: str, error: Exception) -> TypeError:
    return TypeError(
        f"ember.cli cannot evaluate the annotations of {what} ({type(error).__name__}: "
        f"{error}): every name an annotation uses must be importable where it is written "
        "(not only under `if TYPE_CHECKING:`)"
    )


_LEAVES: frozenset[Any] = frozenset({int, float, str, bool, type(None), Path})
_CONTAINERS: frozenset[Any] = frozenset(
    {list, tuple, set, frozenset, dict}
    | {abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet, abc.Mapping, abc.MutableMapping}
)
_EACH_PART: frozenset[Any] = frozenset(
    {typing.Union, types.UnionType, typing.Required, typing.NotRequired}
)


def _data_classes(parameters: dict[str, Any]) -> set[type]:
    """The dataclasses and TypedDicts the annotations of ``parameters`` hold; TypeError unless
    every value they accept is data that no config can make ember.cli import or call, naming
    the parameter and what to write instead."""
    classes: set[type] = set()
    for name, annotation in parameters.items():
        found = _not_data(annotation, classes)
        if found is not None:
            _refuse(name, annotation, *found)
    return classes


def _refuse(name: str, annotation: Any, field: str, part: Any, why: str) -> NoReturn:
    where = f" (its field {field[1:]})" if field else ""
    raise TypeError(
        f"ember.cli cannot read main's parameter {name!r}{where} as data: it is annotated "
        f"{_type_name(annotation)}, and {_type_name(part)} is {why}. A config file is data and "
        "never names code to import or call: annotate it with a dataclass of the values it "
        "needs, or with dict[str, int | float | str], and build the object in main"
    )


def _not_data(annotation: Any, classes: set[type]) -> tuple[str, Any, str] | None:
    """The first part of ``annotation`` whose values are not data, as (the dotted field it is
    in, the part, why), or None: every value is ``int``, ``float``, ``str``, ``bool``, ``None``,
    a ``Path``, a ``Literal`` or ``Enum`` choice, JSON-like data (``Any``, ``object``), a
    union, list, tuple, set or dict of these, or a plain dataclass or TypedDict of them.
    ``classes``: the dataclasses and TypedDicts met so far, to which those met are added (each
    is checked once, so one that holds itself is fine)."""
    if annotation is Any or annotation is object or annotation in _LEAVES:
        return None
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return None
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return None
    parts = _parts(annotation, origin)
    if parts is not None:
        return next(filter(None, (_not_data(part, classes) for part in parts)), None)
    fields = _fields(annotation)
    if fields is None:
        return "", annotation, _why_not_data(annotation, origin)
    if annotation in classes:
        return None
    classes.add(annotation)
    for field, hint in fields.items():
        found = _not_data(hint, classes)
        if found is not None:
            return f".{field}{found[0]}", found[1], found[2]
    return None


def _parts(annotation: Any, origin: Any) -> tuple[Any, ...] | None:
    """What a union, a container or a wrapper (``Annotated``, ``NewType``, ``InitVar``) holds,
    or None if ``annotation`` is none of these."""
    if origin in _EACH_PART or origin in _CONTAINERS:
        return tuple(part for part in typing.get_args(annotation) if part is not Ellipsis)
    if annotation in _CONTAINERS:
        return ()  # a bare list or dict: of JSON-like data
    if origin is typing.Annotated:
        return typing.get_args(annotation)[:1]
    if isinstance(annotation, typing.NewType):
        return (annotation.__supertype__,)
    if isinstance(annotation, dataclasses.InitVar):
        return (annotation.type,)
    return None


def _fields(annotation: Any) -> dict[str, Any] | None:
    """The annotations of what a plain dataclass's ``__init__`` or a TypedDict takes, or None
    if ``annotation`` is neither. A dataclass with a base that is not a dataclass is not plain:
    jsonargparse would take a ``class_path`` for it, as for any class."""
    if typing.is_typeddict(annotation):
        try:
            return typing.get_type_hints(annotation, include_extras=True)
        except _UNEVALUABLE as error:
            raise _unevaluable(annotation.__name__, error) from error
    bases = inspect.getmro(annotation) if isinstance(annotation, type) else ()
    if not bases or not all(
        dataclasses.is_dataclass(base) for base in bases if base not in (object, typing.Generic)
    ):
        return None
    signature = _signature(annotation, annotation.__name__)
    return {name: parameter.annotation for name, parameter in signature.parameters.items()}


def _why_not_data(part: Any, origin: Any) -> str:
    if part is abc.Callable or origin is abc.Callable:
        return "a callable: a config would name a function to import"
    if part is type or origin is type:
        return "a class: a config would name one to import"
    if part is types.ModuleType:
        return "a module: a config would name one to import"
    if isinstance(part, type):
        return (
            "a class that is not a plain dataclass: jsonargparse would build it, or any class "
            "a config names in class_path, from the config"
        )
    return "not a type ember.cli reads as data"


@contextmanager
def _values_are_data(classes: set[type]) -> Iterator[None]:
    """jsonargparse's settings while ember.cli parses: every import path a value names is
    denied, whatever else the process allowed, but those of ``classes``, the dataclasses and
    TypedDicts of ``main``'s annotations (jsonargparse imports ``Data`` by its path to build an
    ``Optional[Data]``); and a ``class_path`` in an ``Any`` value stays a mapping, never built.
    The annotations checked (:func:`_not_data`) leave no value that needs another import: this
    is the second wall. The settings are the process's: they are restored after, for whatever
    else uses jsonargparse (they have no public getter, and a denylist cannot be taken back
    through ``set_parsing_settings``)."""
    from jsonargparse import _common

    settings = _common.parsing_settings
    saved = dict(settings)
    allowed = {path: True for cls in classes for path in _import_paths(cls)}
    settings.update(
        import_path_verdicts={"*": False, **allowed},
        import_paths_enforced=True,
        instantiate_subclass_spec_in_any=False,
        validate_subclass_spec_in_any=False,
    )
    try:
        yield
    finally:
        settings.clear()
        settings.update(saved)


def _import_paths(cls: type) -> set[str]:
    """The paths jsonargparse may import ``cls`` by: where it is defined, and each package
    above that which re-exports it (jsonargparse takes the shortest)."""
    parts = cls.__module__.split(".")
    packages = [".".join(parts[: end + 1]) for end in range(len(parts))]
    return {f"{cls.__module__}.{cls.__qualname__}"} | {
        f"{package}.{cls.__qualname__}"
        for package in packages
        if getattr(sys.modules.get(package), cls.__qualname__, None) is cls
    }


def _arguments(args: Sequence[str] | None) -> list[str]:
    if args is None:
        return sys.argv[1:]
    if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
        raise TypeError(
            f"args must be a list of strings, as on a command line (['--lr', '0.1']), got {args!r}"
        )
    return list(args)


def _check_values(parser: ArgumentParser, argv: list[str]) -> None:
    """Exit 2 if an option's value is YAML whose aliases repeat too much, that nests too deep or
    that holds too many values, as a ``--config`` file's option may not: jsonargparse reads a
    value as YAML for many types, checks a list in a time that grows with the square of its
    length, and prints the whole of a value it refuses (a 400-byte "billion laughs" would be
    printed for hours)."""
    for token in argv:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        try:
            check_value(value)
        except ValueError as error:
            shown = value if len(value) <= 40 else value[:37] + "..."
            parser.error(f"the value {shown!r} on the command line: {error}")


def _files_first(argv: list[str]) -> list[str]:
    """``argv`` with its ``--config`` options moved to the front, in their order: files are read
    first, so that every other option overrides them wherever it stands."""
    files: list[str] = []
    others: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == _CONFIG:
            files.append(token)
            value = next(tokens, None)  # none: jsonargparse says the option needs a file
            files.extend([] if value is None else [value])
        elif token.startswith(_CONFIG + "="):
            files.append(token)
        else:
            others.append(token)
    return [*files, *others]


def _parser(main: Callable[..., Any], prog: str | None) -> ArgumentParser:
    try:
        import jsonargparse
    except ImportError as error:
        raise ImportError(
            "ember.cli reads the command line with jsonargparse: pip install ember[cli]"
        ) from error
    # the project's dataclasses document a field with a docstring under it (as ember's do)
    jsonargparse.set_parsing_settings(docstring_parse_attribute_docstrings=True)
    doc = inspect.getdoc(main) or ""
    parser = _explaining_parser()(
        prog=prog,
        description=doc.split("\n\n")[0] or None,
        allow_abbrev=False,  # a misspelled key is refused, never taken for the option it begins
    )
    parser.add_argument(_CONFIG, action=_config_file_action(), help=_CONFIG_HELP)
    parser.add_function_arguments(main, as_group=False)
    _without_group_files(parser)
    return parser


def _config_file_action() -> type[argparse.Action]:
    """jsonargparse's ``--config`` action, reading its file as data (``_config_file.py``): the
    one option that reads a file. Being jsonargparse's, it brings ``--print_config``."""
    import jsonargparse

    # ActionConfigFile is public (jsonargparse's docs) but re-exported without `as`
    base: type[argparse.Action] = jsonargparse.ActionConfigFile  # type: ignore[attr-defined]

    class ConfigFile(base):  # type: ignore[valid-type,misc]  # base is imported at run time
        def __call__(
            self,
            parser: ArgumentParser,
            namespace: Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            try:
                options = read_config(values)
            except ValueError as error:  # its message names the option and the file
                raise argparse.ArgumentError(None, str(error)) from None
            if self.dest in options:  # jsonargparse would read the file it names
                raise argparse.ArgumentError(
                    None,
                    f"--config {values} has a key {self.dest!r}: a config file cannot read "
                    "another file; give each file with its own --config (later ones override)",
                )
            # as jsonargparse applies a file: no defaults, nothing required yet (a later file
            # or option may give it), then merged key by key over what came before
            applied = parser.parse_object(options, env=False, defaults=False, _skip_validation=True)
            _check_groups(parser, applied, f"--config {values}")
            namespace.update(applied)
            namespace[self.dest] = [*(namespace.get(self.dest) or []), values]

    return ConfigFile


def _check_groups(parser: ArgumentParser, applied: Namespace, source: str) -> None:
    """ArgumentError unless each dataclass group ``source`` gives is a mapping of its fields:
    ``data: FILE`` once read FILE (:func:`_without_group_files`); now it is refused."""
    from jsonargparse import Namespace

    for group in parser.groups or {}:
        if group in applied and not isinstance(applied[group], Namespace):
            raise argparse.ArgumentError(
                None,
                f"{source}: {group!r} is {_kind(applied[group])}, not a mapping of its fields "
                f"({group}: {{field: value}}); only --config reads a file",
            )


def _kind(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _without_group_files(parser: ArgumentParser) -> None:
    """Remove the option jsonargparse gives each dataclass group to read a file (``--data
    FILE``, or ``data: FILE`` in a YAML, which read FILE): only ``--config`` reads one. The
    group's fields stay options (``--data.batch_size``, ``data: {batch_size: 8}``)."""
    from jsonargparse._actions import _ActionConfigLoad  # private: the group file option's type

    for action in [action for action in parser._actions if isinstance(action, _ActionConfigLoad)]:
        for option in action.option_strings:  # as argparse removes an option it replaces
            parser._option_string_actions.pop(option, None)
        action.container._remove_action(action)  # type: ignore[attr-defined]  # set by argparse


def _explaining_parser() -> type[ArgumentParser]:
    """jsonargparse's parser, whose refusals also say what was expected (:func:`_explain`)."""
    from jsonargparse import ArgumentParser

    class ExplainingParser(ArgumentParser):
        def error(self, message: str, ex: Exception | None = None) -> NoReturn:
            super().error(_explain(message, _options(self)), ex)

    return ExplainingParser


def _options(parser: ArgumentParser) -> dict[str, str]:
    """Each option's key (``data.batch_size``) and its type, as ``--help`` names it."""
    options: dict[str, str] = {}
    for action in parser._actions:  # argparse's list of what the parser accepts
        if not action.option_strings or action.dest in ("help", "config", "print_config"):
            continue
        hint = getattr(action, "_typehint", None)  # jsonargparse's annotation of the option
        options[action.dest] = "" if hint is None else _type_name(hint)
    return options


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<tokens>.*)", re.DOTALL)
_NOT_ACCEPTED = re.compile(
    r"(?:Option '(?P<key>[^']+)' is not accepted"
    r"|Group '(?P<group>[^']+)' does not accept option '(?P<field>[^']+)')"
)
_REQUIRED = re.compile(r"the following arguments are required: (?P<keys>.*)")


def _explain(message: str, options: dict[str, str]) -> str:
    """jsonargparse's refusal ``message`` with what was expected added: the nearest accepted
    key for an unknown one, the type of a missing one; other messages (a wrong type: jsonargparse
    names the key, the value and the type already) are returned as they are."""
    found = _UNRECOGNIZED.search(message)
    if found:
        unknown = [t.split("=")[0][2:] for t in found["tokens"].split() if t.startswith("--")]
        return message + "".join(_nearest(f"--{key}", key, options) for key in unknown)
    found = _NOT_ACCEPTED.search(message)
    if found:
        key = found["key"] or f"{found['group']}.{found['field']}"
        return f"{message} (in a --config file){_nearest(repr(key), key, options)}"
    found = _REQUIRED.search(message)
    if found:
        missing = [key.strip() for key in found["keys"].split(",")]
        wanted = "; ".join(
            f"give --{key} VALUE or '{key}:' in a --config file"
            + (f" (type: {options[key]})" if options.get(key) else "")
            for key in missing
        )
        return f"{message}; {wanted}"
    return message


def _nearest(shown: str, key: str, options: dict[str, str]) -> str:
    """``; {shown} is not an option, did you mean --near?`` and where every option is listed."""
    near = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    if not near:  # a key given at the wrong depth: --lr for --optimizer.lr
        leaves = {option.rsplit(".", 1)[-1]: option for option in options}
        near = [leaves[leaf] for leaf in difflib.get_close_matches(key, list(leaves), n=1)]
    guess = f", did you mean --{near[0]}?" if near else ""
    return f"\n  {shown} is not an option{guess} (--help lists them all)"
