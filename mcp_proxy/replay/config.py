"""Ignore paths kept next to the recordings: ``mcptape.toml`` in the recording's directory.

What legitimately differs between two runs of one conversation (request ids, timestamps, session
ids, ``_meta`` with its progress tokens, sealed ``requestState``) is ignored by default (see
:mod:`mcp_proxy.diff`). What else differs for *your* server — a clock in a tool result, a random
id in a resource — belongs next to the recording, so that ``diff``, ``replay``, ``mock``, the
pytest plugin and CI all read the same list::

    # recordings/mcptape.toml
    [diff]
    ignore = ["$..timestamp"]                 # for every recording in this directory

    [diff."weather.mcptape.jsonl"]
    ignore = ["$.result.content[0].text"]     # for this recording only

Paths are JSONPaths as ``--ignore`` reads them (RFC 9535, :mod:`mcp_proxy.normalize`); a bad one is a usage error naming the file.

``mcptape replay DIR`` replays every recording of a directory against one server; recordings of
other servers name theirs in the same file (the first glob that matches the file name wins)::

    [replay."nested-*"]
    command = ["python", "-m", "my_server", "--with-sampling"]   # or a string, split like a shell

    [replay."remote-*"]
    upstream = "http://127.0.0.1:8000/mcp"
"""

from __future__ import annotations

import fnmatch
import shlex
import tomllib
from pathlib import Path
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.normalize import JsonPathError, parse_jsonpath

CONFIG_NAME = "mcptape.toml"


def config_path(recording: str | Path) -> Path:
    return Path(recording).parent / CONFIG_NAME


def _config(recording: str | Path) -> tuple[Path, dict[str, Any]]:
    """``mcptape.toml`` beside ``recording`` (an empty document when there is none)."""
    path = config_path(recording)
    if not path.is_file():
        return path, {}
    try:
        return path, tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: cannot read it: {exc}") from exc


def server_for(recording: str | Path) -> tuple[list[str] | None, str | None]:
    """The ``(command, upstream)`` a ``[replay."GLOB"]`` table names for this recording file.

    ``(None, None)`` when no table matches: the server given on the command line is used.
    """
    path, doc = _config(recording)
    section = doc.get("replay", {})
    if not isinstance(section, dict):
        raise UserError(f'{path}: [replay] must be a table of [replay."GLOB"] tables')
    for glob, table in section.items():
        if not isinstance(table, dict):
            raise UserError(f"{path}: [replay.{glob!r}] must be a table (command or upstream)")
        if not fnmatch.fnmatchcase(Path(recording).name, glob):
            continue
        command, upstream = table.get("command"), table.get("upstream")
        if isinstance(command, str):
            command = shlex.split(command)
        ok_command = command is None or (
            isinstance(command, list) and command and all(isinstance(c, str) for c in command)
        )
        if not ok_command or (upstream is not None and not isinstance(upstream, str)):
            raise UserError(
                f"{path}: [replay.{glob!r}] command must be a list of strings (or one string),"
                " upstream a URL"
            )
        if (command is None) == (upstream is None):
            raise UserError(f"{path}: [replay.{glob!r}] needs command or upstream (one of them)")
        return command, upstream
    return None, None


def ignores_for(recording: str | Path | None) -> list[str]:
    """The ignore paths ``mcptape.toml`` beside ``recording`` lists for it (none if no file)."""
    if recording is None:
        return []
    path, doc = _config(recording)
    if not doc:
        return []
    section = doc.get("diff", {})
    if not isinstance(section, dict):
        raise UserError(f"{path}: [diff] must be a table")
    found: list[str] = []
    for table in (section, section.get(Path(recording).name, {})):
        values = table.get("ignore", []) if isinstance(table, dict) else None
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise UserError(f"{path}: ignore must be a list of JSONPath strings")
        for value in values:
            try:
                parse_jsonpath(value)
            except JsonPathError as exc:
                raise UserError(f"{path}: {exc}") from exc
            found.append(value)
    return found


__all__ = ["CONFIG_NAME", "config_path", "ignores_for", "server_for"]
