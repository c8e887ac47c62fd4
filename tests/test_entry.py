import os
from pathlib import Path

import pytest

from mcp_proxy.entry import parse_plain_record


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["record", "--", "srv", "-x"], (None, None, ["srv", "-x"])),
        (
            ["record", "--name", "fs", "--db", "/d.db", "--", "npx", "--", "y"],
            ("fs", "/d.db", ["npx", "--", "y"]),
        ),
        (["record", "-n", "fs", "--", "srv"], ("fs", None, ["srv"])),
        (["record", "--name=-odd", "--db=x.db", "--", "srv"], ("-odd", "x.db", ["srv"])),
    ],
)
def test_the_plain_stdio_form_takes_the_fast_path(argv: list[str], expected: tuple) -> None:
    assert parse_plain_record(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["sessions"],
        ["record", "--upstream", "http://x/mcp"],
        ["record", "--help", "--", "srv"],
        ["record", "--name", "fs", "--"],
        ["record", "--name", "--", "srv"],
        ["record", "--upstream", "http://x", "--", "srv"],
        ["record", "--unknown", "--", "srv"],
        ["record", "-n=fs", "--", "srv"],
    ],
)
def test_everything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert parse_plain_record(argv) is None


def test_the_fast_path_records_where_db_says_relative_to_the_callers_directory(
    tmp_path: Path,
) -> None:
    """The recorder process resolves ``--db`` (the relay no longer imports the store): a
    relative path is the caller's directory's, and MCPTAPE_DB applies when --db is absent."""
    import subprocess
    import sys

    from tests.helpers import db as rdb

    mcptape = str(Path(sys.executable).parent / "mcptape")
    server = [sys.executable, "-m", "mcp_proxy.testing.rawecho"]
    req = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    env = {**os.environ, "MCPTAPE_DB": str(tmp_path / "env.db")}
    for args, where in (
        (["--db", "rel.db"], tmp_path / "rel.db"),
        (["--name", "e"], tmp_path / "env.db"),
    ):
        out = subprocess.run(
            [mcptape, "record", *args, "--", *server],
            input=req,
            capture_output=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.count(b"\n") == 1
        assert [f["raw"] for f in rdb.frames(where)] == [req, out.stdout]
