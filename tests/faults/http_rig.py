"""The rig of the HTTP fault tests: an SDK upstream, the real relay with a rules file, and a
server that really misbehaves (:class:`~mcp_proxy.testing.misbehave_http.MisbehavingServer`).

One rig serves a whole test module: each test writes the rules it needs (the relay re-reads the
file) and reads what it produced from the recording while the relay runs (rows newer than the
test's start).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcp_proxy.testing.client import make_client, tool_text
from mcp_proxy.testing.misbehave_http import MisbehavingServer
from tests.helpers.db import wait_until
from tests.relay.conftest import Upstream, start_upstream
from tests.relay.launch import relay_process

HERE = Path(__file__).resolve().parent
RELAY_SCRIPT = HERE / "http_relay.py"


@dataclass
class Relay:
    url: str
    proc: subprocess.Popen[bytes]
    db: Path
    rules: Path
    stderr: list[str] = field(default_factory=list)

    def set_rules(self, text: str) -> None:
        """Switch the relay's rules (it checks the file every 50 ms, at the next message)."""
        self.rules.write_text(text)
        time.sleep(0.12)

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        con = sqlite3.connect(self.db, timeout=5)
        con.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in con.execute(sql, params).fetchall()]
        except sqlite3.OperationalError:
            return []  # the recorder has not created the tables yet
        finally:
            con.close()

    def mark(self) -> tuple[int, int, int]:
        """Where the recording is now (the ids a test's rows will be above)."""

        def top(table: str) -> int:
            rows = self.query(f"SELECT max(id) AS m FROM {table}")
            return int(rows[0]["m"] or 0) if rows else 0

        return top("frames"), top("findings"), top("http_exchanges")

    def wait_finished(self, since: tuple[int, int, int], within: float = 20.0) -> None:
        """Wait until the exchanges since ``since`` are recorded, finished, with their frames."""

        def finished() -> bool:
            exchanges = self.query("SELECT outcome FROM http_exchanges WHERE id > ?", since[2])
            frames = self.query("SELECT id FROM frames WHERE id > ? LIMIT 1", since[0])
            return bool(exchanges and frames) and all(e["outcome"] for e in exchanges)

        assert wait_until(finished, within), "the exchange was never recorded as finished"

    def wait_recorded(
        self, since: tuple[int, int, int], code: str, within: float = 20.0
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """Frames, findings and exchanges recorded since ``since``, once finding ``code`` is in
        and the exchanges are finished (the recorder writes a moment after the relay)."""
        deadline = time.monotonic() + within
        while True:
            findings = self.query("SELECT * FROM findings WHERE id > ? ORDER BY id", since[1])
            exchanges = self.query(
                "SELECT * FROM http_exchanges WHERE id > ? ORDER BY id", since[2]
            )
            done = exchanges and all(e["outcome"] is not None for e in exchanges)
            if any(f["code"] == code for f in findings) and done:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"no {code} finding recorded: {findings} {exchanges}")
            time.sleep(0.05)
        time.sleep(0.3)  # the last frames of the batch
        frames = self.query("SELECT * FROM frames WHERE id > ? ORDER BY id", since[0])
        findings = self.query("SELECT * FROM findings WHERE id > ? ORDER BY id", since[1])
        exchanges = self.query("SELECT * FROM http_exchanges WHERE id > ? ORDER BY id", since[2])
        for e in exchanges:
            for k in ("request_headers", "response_headers", "meta"):
                e[k] = json.loads(e[k]) if e[k] else None
        return frames, findings, exchanges


@contextlib.contextmanager
def run_relay(upstream: str, db: Path, rules: Path) -> Iterator[Relay]:
    rules.write_text("")
    argv = [sys.executable, str(RELAY_SCRIPT), upstream, str(db), str(rules)]
    with relay_process(argv, stop_timeout=20) as (proc, url, lines):
        yield Relay(url, proc, db, rules, lines)


@dataclass
class Rig:
    up: Upstream
    relay: Relay
    bad: MisbehavingServer


@contextlib.contextmanager
def rig(tmp: Path, *upstream_args: str, transport: str = "http") -> Iterator[Rig]:
    with start_upstream("--transport", transport, *upstream_args) as up:
        bad = MisbehavingServer(up.url).start()
        try:
            with run_relay(up.url, tmp / "rec.db", tmp / "faults.toml") as relay:
                yield Rig(up, relay, bad)
        finally:
            bad.stop()


def leaf(exc: BaseException) -> BaseException:
    """The innermost first exception of an exception group (what actually went wrong)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def call(
    url: str,
    *,
    mode: str = "auto",
    tool: str = "echo",
    args: dict[str, Any] | None = None,
    within: float = 4.0,
    progress: list[float] | None = None,
) -> tuple[Any, ...]:
    """One ``tools/call`` by the SDK client, and what its caller observed, comparable:
    ``("result", isError, text)``, ``("error", exception type, code, message)`` or
    ``("timeout",)``."""

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append(p)

    try:
        with anyio.fail_after(within + 30):  # connecting may be slow on a busy machine
            async with make_client(url, mode=mode) as client:
                with anyio.fail_after(within):  # the call itself: what a fault may hold up
                    result = await client.call_tool(
                        tool,
                        args if args is not None else {"text": "héllo"},
                        progress_callback=on_progress,
                    )
                return ("result", bool(result.is_error), tool_text(result))
    except TimeoutError:
        return ("timeout",)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        e = leaf(exc)
        if isinstance(e, TimeoutError):
            return ("timeout",)
        error = getattr(e, "error", None)
        code = getattr(error, "code", None)
        message = getattr(error, "message", None) or str(e)
        return ("error", type(e).__name__, code, message)


def rules_toml(*rules: str) -> str:
    """A rules file holding these one-line rules (``[[fault]]`` tables, values as strings)."""
    import shlex

    out = []
    for rule in rules:
        words = shlex.split(rule)
        out.append(f"[[fault]]\naction = {json.dumps(words[0])}")
        for word in words[1:]:
            key, _, value = word.partition("=")
            out.append(f"{key} = {json.dumps(value)}")
    return "\n".join(out) + "\n"


def both(
    g: Rig,
    rule: str,
    behaviour: str,
    params: dict[str, str] | None = None,
    **kw: Any,
) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, int, int]]:
    """The call through the relay under ``rule``, and directly against the misbehaving server
    (at the same time: two independent clients, half the wait).

    Returns both outcomes and the recording mark taken before the relayed call.
    """
    g.relay.set_rules(rules_toml(rule))
    mark = g.relay.mark()
    out: dict[str, tuple[Any, ...]] = {}

    async def one(key: str, url: str) -> None:
        out[key] = await call(url, **kw)

    async def pair() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "relayed", g.relay.url)
            tg.start_soon(one, "direct", g.bad.url(behaviour, **(params or {})))

    anyio.run(pair)
    g.relay.set_rules("")
    return out["relayed"], out["direct"], mark
