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

Built on jsonargparse, the parser under LightningCLI, which brings ``--config``,
``--print_config`` and YAML with it (``docs/cli.md`` says why not tyro). It is the ``ember[cli]``
extra, imported when ``cli`` is called.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ember.train._experiment import Experiment, running_experiment

if TYPE_CHECKING:
    from jsonargparse import ArgumentParser

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
    argv = _arguments(args)
    parser = _parser(main, prog=None if args is None else getattr(main, "__name__", None))
    namespace = parser.parse_args(_files_first(argv))
    resolved = json.loads(parser.dump(namespace, format="json", skip_unset=False))
    experiment = Experiment(resolved, parser.dump(namespace, format="yaml", skip_unset=False))
    values = parser.instantiate(namespace)
    with running_experiment(experiment):
        return main(**{name: values[name] for name in parameters})


def _parameters(main: Callable[..., Any]) -> list[str]:
    """The names of ``main``'s parameters, refusing one the command line cannot give."""
    if not callable(main):
        raise TypeError(f"ember.cli needs a function, got {main!r} ({type(main).__name__})")
    names: list[str] = []
    for name, parameter in inspect.signature(main).parameters.items():
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
        names.append(name)
    return names


def _arguments(args: Sequence[str] | None) -> list[str]:
    if args is None:
        return sys.argv[1:]
    if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
        raise TypeError(
            f"args must be a list of strings, as on a command line (['--lr', '0.1']), got {args!r}"
        )
    return list(args)


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
    # ActionConfigFile is public (jsonargparse's docs) but re-exported without `as`
    config_file = jsonargparse.ActionConfigFile  # type: ignore[attr-defined]
    parser.add_argument(_CONFIG, action=config_file, help=_CONFIG_HELP)
    parser.add_function_arguments(main, as_group=False)
    return parser


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
