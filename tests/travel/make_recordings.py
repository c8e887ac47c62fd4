"""Regenerate the example recordings in ``recordings/`` with the real relay and test servers.

Run from the repository root: ``python -m tests.travel.make_recordings``. Each recording is an
SDK client driving a test server launched through ``mcptape record`` (exactly as a host would),
exported with ``mcptape export``. Tests and the README use these files; regenerating them
changes ids and timestamps only (the diff of old vs new is empty: ``mcptape diff OLD NEW``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
    stdio_params,
    tool_text,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"


def mcptape() -> list[str]:
    script = Path(sys.executable).parent / "mcptape"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mcp_proxy.cli"]


def through_recorder(params: StdioServerParameters, db: str, name: str) -> StdioServerParameters:
    cmd = mcptape()
    env = dict(params.env or {})
    if os.environ.get("PYTHONPATH"):  # the SDK client passes only a few variables on
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return params.model_copy(
        update={
            "env": env or None,
            "command": cmd[0],
            "args": [
                *cmd[1:],
                "record",
                "--db",
                db,
                "--name",
                name,
                "--",
                params.command,
                *params.args,
            ],
        }
    )


async def scripted(db: str, name: str, mode: str) -> None:
    params = through_recorder(stdio_params(SCRIPTED_PRESETS, name="mcptape-test"), db, name)
    rec = CallbackRecorder()
    async with make_client(params, mode=mode, recorder=rec) as client:
        await run_scripted_session(client, rec)


async def nested_legacy(db: str, name: str) -> None:
    """Server→client requests (sampling, roots, elicitation) in the initialize era."""
    params = through_recorder(stdio_params("sampling,elicitation", name="mcptape-test"), db, name)
    rec = CallbackRecorder()
    async with make_client(params, mode="legacy", recorder=rec) as client:
        out: list[Any] = []
        out.append(tool_text(await client.call_tool("sample", {"prompt": "Say hi"})))
        out.append(tool_text(await client.call_tool("roots", {})))
        out.append(tool_text(await client.call_tool("ask", {"question": "Name?"})))


async def mrtr_modern(db: str, name: str) -> None:
    """MRTR chains (input_required, then a retry with requestState) on 2026-07-28."""
    params = through_recorder(stdio_params("mrtr", name="mcptape-test"), db, name)
    rec = CallbackRecorder()
    async with make_client(params, mode="auto", recorder=rec) as client:
        await client.call_tool("confirm", {"action": "deploy"})
        await client.call_tool("countdown", {"rounds": 2})


RECIPES = {
    "basic-2026": lambda db: scripted(db, "basic-2026", "auto"),
    "basic-legacy": lambda db: scripted(db, "basic-legacy", "legacy"),
    "nested-legacy": lambda db: nested_legacy(db, "nested-legacy"),
    "mrtr-2026": lambda db: mrtr_modern(db, "mrtr-2026"),
}


def main() -> int:
    RECORDINGS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "rec.db")
        for name, recipe in RECIPES.items():
            asyncio.run(recipe(db))
            out = RECORDINGS / f"{name}.mcptape.jsonl"
            subprocess.run([*mcptape(), "export", name, "--db", db, "-o", str(out)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
