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

Paths are the JSONPath subset of ``--ignore``; a bad one is a usage error naming the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from mcp_proxy.errors import UserError
from mcp_proxy.normalize import JsonPathError, parse_jsonpath

CONFIG_NAME = "mcptape.toml"


def config_path(recording: str | Path) -> Path:
    return Path(recording).parent / CONFIG_NAME


def ignores_for(recording: str | Path | None) -> list[str]:
    """The ignore paths ``mcptape.toml`` beside ``recording`` lists for it (none if no file)."""
    if recording is None:
        return []
    path = config_path(recording)
    if not path.is_file():
        return []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: cannot read it: {exc}") from exc
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


__all__ = ["CONFIG_NAME", "config_path", "ignores_for"]
