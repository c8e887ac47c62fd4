"""``mcptape record --upstream``: run the relay with its recorder process until a signal.

Also watches the recorder process: if it dies, the relay says so at once (once) and keeps
relaying, and its last line says what was relayed and that the recording is incomplete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.recorder.client import RecorderClient
from mcp_proxy.redact import ENV_REDACT, redactor_for_recording
from mcp_proxy.relay.http.common import RelayConfig, Target, is_loopback
from mcp_proxy.relay.http.server import HTTPRelay
from mcp_proxy.relay.stop import StopSummary, print_stop

__all__ = ["record_http"]


async def _serve(config: RelayConfig, db_url: str, output: str = "text") -> int:
    # The recorder runs in its own process (see mcp_proxy.recorder.client): the event loop never
    # shares a GIL with classification, redaction and database writes. It learns the redaction
    # policy from its environment; bodies are redacted there, before anything is written.
    os.environ[ENV_REDACT] = config.redactor.to_env()
    recorder = RecorderClient(db_url)
    recorder.start()
    relay = HTTPRelay(config, recorder)
    try:
        local = await relay.start()
    except UserError:
        await asyncio.to_thread(recorder.close)
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    # Only now announce: a signal sent right after the line must find our handlers in place.
    print(f"mcptape: relaying {local} -> {config.upstream}", file=sys.stderr, flush=True)
    if not is_loopback(config.host):
        print(
            f"mcptape: warning: listening on {config.host}, reachable from other machines; "
            "their traffic (and the upstream's answers) will be relayed and recorded",
            file=sys.stderr,
            flush=True,
        )
    try:
        await stop.wait()
    finally:
        if config.intercepts is not None:  # a message still held is let go before the close
            config.intercepts.close()
        await relay.close()
        await asyncio.to_thread(recorder.close)
    print_stop(_stop_summary(recorder, relay), output)
    return 0


def _stop_summary(recorder: RecorderClient, relay: HTTPRelay) -> StopSummary:
    """What was relayed, and what was recorded — never more than the truth.

    The recorder client notices a dead worker itself (at once, on stderr), replaces it and
    counts what the dead one had not written as a recording gap; so the summary only says
    "recorded" when no worker died and the last one ended cleanly.
    """
    n, sessions = relay.stats_exchanges, relay.router.sessions_created
    death = getattr(recorder, "worker_death", None)
    proc = getattr(recorder, "proc", None)
    code = proc.poll() if proc is not None else None
    if death is None and code in (0, None):
        return StopSummary("http", True, exchanges=n, sessions=sessions)
    if death is None:
        death = f"exit status {code}"
    restarts = getattr(recorder, "restarts", 0)
    after = (
        f"it was restarted {restarts} time(s) and what was lost is counted as a recording gap"
        if restarts
        else "what came later was NOT recorded"
    )
    problem = f"the recorder process died ({death}); {after}"
    return StopSummary("http", False, exchanges=n, sessions=sessions, problem=problem)


def loop_factory() -> Any:
    """uvloop's event loop when it is installed (cheaper I/O per request: about 15% less relay
    CPU here); the standard loop otherwise. ``MCPTAPE_LOOP=asyncio`` forces the standard one."""
    if os.environ.get("MCPTAPE_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def record_http(
    upstream: str,
    *,
    db_url: str,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    redact: bool = True,
    redact_headers: list[str] | tuple[str, ...] = (),
    redact_paths: list[str] | tuple[str, ...] = (),
    idle_cut: float = 300.0,
    connect_timeout: float = 10.0,
    response_timeout: float | None = None,
    allow_hosts: list[str] | tuple[str, ...] = (),
    faults: Any = None,
    intercepts: Any = None,
    output: str = "text",
) -> int:
    """``mcptape record --upstream URL``: relay and record until SIGINT/SIGTERM; exit status.

    ``faults``: a ``FaultEngine`` whose rules the relay carries out (None: no fault injection).
    ``output``: ``json`` makes the last line on stderr a JSON summary (:mod:`mcp_proxy.relay.stop`).
    """
    redactor = redactor_for_recording(redact, redact_headers, redact_paths)
    config = RelayConfig(
        upstream=upstream,
        host=host,
        port=port,
        name=name,
        idle_cut=idle_cut,
        connect_timeout=connect_timeout,
        response_timeout=response_timeout if response_timeout else None,
        redactor=redactor,
        allow_hosts=tuple(allow_hosts),
        faults=faults,
        intercepts=intercepts,
    )
    Target(upstream)  # validate before anything starts
    # Relay latency matters more than the writer thread's throughput (see relay/stdio.py).
    sys.setswitchinterval(0.0005)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    logging.getLogger("aiohttp.access").setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_serve(config, db_url, output), loop_factory=loop_factory())
    except KeyboardInterrupt:
        return 130
