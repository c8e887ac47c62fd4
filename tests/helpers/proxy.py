"""Put ``mcptape record`` in front of a stdio server, exactly as ``mcptape install`` would."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mcp import StdioServerParameters

from tests.conftest import mcptape_cmd


def proxied(
    params: StdioServerParameters,
    db: Path | str,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
) -> StdioServerParameters:
    """The same server, launched through ``mcptape record --db DB --name NAME -- …`` (``db``: a
    SQLite file or a database URL)."""
    cmd = mcptape_cmd()
    update: dict[str, object] = {
        "command": cmd[0],
        "args": [
            *cmd[1:],
            "record",
            "--db",
            str(db),
            "--name",
            name,
            "--",
            params.command,
            *params.args,
        ],
    }
    if env is not None:
        update["env"] = dict(env)
    return params.model_copy(update=update)
