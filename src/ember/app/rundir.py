"""Run directories that an ember command owns and may replace, and only those."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["claim_directory", "marker_name"]


def marker_name(command: str) -> str:
    """The file that marks a directory as written by ``ember {command}`` (options as words:
    ``digits --test`` is ``.ember-digits-test``)."""
    return ".ember-" + "-".join(command.replace("--", "").split())


def claim_directory(directory: Path, command: str) -> None:
    """Give ``ember {command}`` an empty ``directory``, replacing an earlier run of it.

    A directory that exists without the command's marker is someone else's: it is never
    deleted, and ``ValueError`` says to choose another one.
    """
    marker = directory / marker_name(command)
    if directory.exists():
        if not marker.exists():
            raise ValueError(
                f"{str(directory)!r} exists and is not an earlier `ember {command}` run; "
                "choose another --dir so that nothing in it is overwritten"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    marker.write_text(f"written by `ember {command}`; rerunning it replaces this run\n")
