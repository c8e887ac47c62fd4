"""Replay over stdio: the real stdio relay runs in a thread, the replaying host writes its stdin.

The replay is recorded by the same relay ``mcptape record`` uses, so it is a normal session.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.osutil import write_all
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.replay.drive import DEFAULT_TIMEOUT, Live, ReplayResult, drive, linked_result
from mcp_proxy.replay.plan import outstanding_requests, plan, recorded_states
from mcp_proxy.replay.tasks import task_plan


def replay_stdio(
    session: SessionRecording,
    argv: list[str],
    db_url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    pacing: str = "fast",
    name: str | None = None,
    origin: str = "",
) -> ReplayResult:
    """Replay one recorded session against ``argv`` (a stdio server), record it, diff it."""
    from mcp_proxy.recorder import Recorder
    from mcp_proxy.relay.stdio import StdioRelay

    if not argv:
        raise UserError("no server command given (usage: mcptape replay SOURCE -- COMMAND…)")
    actions = plan(session)
    if not actions:
        raise UserError(f"session {session.label} has no host→server traffic to replay")
    expected = outstanding_requests(session)
    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)
    recorder = Recorder(db_url, flush_interval=0.02)
    procs: list[subprocess.Popen[bytes]] = []
    relay = StdioRelay(
        argv,
        recorder=recorder,
        name=name or f"{session.session.get('name') or session.id[:8]} replay",
        stdin_fd=c2s_r,
        stdout_fd=s2c_w,
        stderr_fd=devnull,
        on_start=procs.append,
    )
    recorder.start()
    outcome: dict[str, Any] = {}

    def run_relay() -> None:
        try:
            outcome["result"] = relay.run()
        except BaseException as exc:  # reported below, in the calling thread
            outcome["error"] = exc
        finally:
            with contextlib.suppress(OSError):
                os.close(s2c_w)

    thread = threading.Thread(target=run_relay, name="replay-relay", daemon=True)
    thread.start()
    notes: list[str] = []
    live = Live(s2c_r)
    try:
        # Let a spawn failure surface before anything is written.
        deadline = time.monotonic() + 10
        while not procs and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if "error" in outcome:
            raise outcome["error"]

        def send(data: bytes) -> None:
            write_all(c2s_w, data)

        drive(
            actions,
            expected,
            send,
            live,
            states=dict(recorded_states(session)),
            timeout=timeout,
            pacing=pacing,
            notes=notes,
            tasks=task_plan(session),
        )
    finally:
        with contextlib.suppress(OSError):
            os.close(c2s_w)  # EOF: the server finishes and exits, as under a real host
        _stop(thread, procs, notes)
        recorder.close()
        os.close(devnull)
        with contextlib.suppress(OSError):
            os.close(s2c_r)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome.get("result")
    sid = relay.session_id
    if sid is None:
        raise UserError("the replay was not recorded (the relay did not start a session)")
    return linked_result(db_url, sid, session, origin, notes, result.exit_code if result else None)


def _stop(thread: threading.Thread, procs: list[subprocess.Popen[bytes]], notes: list[str]) -> None:
    """Give the server 5 s to exit on EOF, then terminate and kill it by pid."""
    thread.join(5.0)
    if not thread.is_alive() or not procs:
        return
    notes.append("the server did not exit within 5 s of end of input; stopped it")
    for stop in (procs[0].terminate, procs[0].kill):
        with contextlib.suppress(ProcessLookupError):
            stop()
        thread.join(5.0)
        if not thread.is_alive():
            return


__all__ = ["replay_stdio"]
