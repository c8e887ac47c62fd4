"""``mcptape check`` and ``mcptape stats``: what a recording says, for people and for CI.

``check`` prints a session's findings and exits non-zero when any reaches ``--fail-on``, so a CI
job can record a session and gate on it. ``stats`` prints per-method counts, error rates and
latency percentiles for one session or many, from the numbers stored when each session ended. Exit codes are documented in
``docs/cli-exit-codes.md``.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands.common import (
    DbOption,
    Format,
    check_limit,
    json_errors,
    open_direct,
    parse_time,
)
from mcp_proxy.limits import STATS_VALUES_KEPT

if TYPE_CHECKING:
    from mcp_proxy.store.direct import DirectStore
    from mcp_proxy.store.rows import SessionRow

#: Tools named by ``stats`` under each session's context cost, the dearest first.
STATS_TOP_TOOLS = 10

#: ``check`` found something at or above ``--fail-on`` (mcptape's own code, distinct from 1 for
#: an unexpected failure; see docs/cli-exit-codes.md).
EXIT_FINDINGS = 5


class FailOn(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"
    never = "never"


class CheckFormat(StrEnum):
    text = "text"
    json = "json"
    junit = "junit"


class Injected(StrEnum):
    report = "report"
    ignore = "ignore"


class MinSeverity(StrEnum):
    info = "info"
    warning = "warning"
    error = "error"


def finding_json(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("code", "severity", "title", "detail", "frame_seqs", "source", "analyzer_version")
    out = {k: row.get(k) for k in keys}
    out["spec"] = row.get("spec")
    return out


@app.command()
@handle_errors
def check(
    sessions: Annotated[
        list[str], typer.Argument(help="Session id prefixes or names (latest with that name).")
    ],
    db: DbOption = None,
    fmt: Annotated[
        CheckFormat,
        typer.Option(
            "--format", help="text, json, or junit (JUnit XML for CI: one test case per finding)."
        ),
    ] = CheckFormat.text,
    fail_on: Annotated[
        FailOn,
        typer.Option(help="Exit 5 when a finding is this severe or worse (never: always 0)."),
    ] = FailOn.error,
    min_severity: Annotated[
        MinSeverity, typer.Option("--min-severity", help="Only print findings this severe.")
    ] = MinSeverity.info,
    recompute: Annotated[
        bool, typer.Option("--recompute", help="Re-analyse even if stored findings are current.")
    ] = False,
    brief: Annotated[bool, typer.Option("--brief", help="One line per finding.")] = False,
    injected: Annotated[
        Injected,
        typer.Option(
            "--injected",
            help="Sessions recorded with --fault: report how the host reacted to each injected"
            " fault (retried, cancelled, silent), or ignore the faults and what they caused.",
        ),
    ] = Injected.report,
) -> None:
    """Print the findings of sessions and exit non-zero by severity (for CI)."""
    json_errors(fmt)
    from mcp_proxy.analysis.catalogue import at_least
    from mcp_proxy.analysis.service import current_findings
    from mcp_proxy.render import finding_text, session_line

    # Through the driver (no event loop, no async store to start: on SQLite no SQLAlchemy).
    url, direct = open_direct(db)
    chosen: dict[str, SessionRow] = {}
    with direct:
        for ref in sessions:
            s = direct.resolve_session(ref)
            chosen.setdefault(s["id"], s)
    results: list[tuple[SessionRow, list[dict[str, Any]]]] = []
    for s in chosen.values():
        rows = current_findings(url, s, recompute=recompute)
        if any(str(r.get("code", "")).startswith("inject.") for r in rows):
            from mcp_proxy.analysis.inject import session_frames, with_injected

            rows = with_injected(rows, session_frames(url, s["id"]), injected.value)
        results.append((s, rows))
    failing = 0
    failing_sessions = 0
    docs = []
    cases: list[tuple[SessionRow, list[dict[str, Any]]]] = []
    for s, rows in results:
        shown = [r for r in rows if at_least(str(r.get("severity")), min_severity.value)]
        counts = {"error": 0, "warning": 0, "info": 0}
        for r in rows:
            counts[str(r.get("severity"))] = counts.get(str(r.get("severity")), 0) + 1
        bad = (
            []
            if fail_on == FailOn.never
            else [r for r in rows if at_least(str(r.get("severity")), fail_on.value)]
        )
        failing += len(bad)
        failing_sessions += bool(bad)
        if fmt == CheckFormat.junit:
            cases.append((s, shown))
            continue
        if fmt == CheckFormat.json:
            docs.append(
                {
                    "session": {
                        "id": s["id"],
                        "name": s.get("name"),
                        "status": s.get("status"),
                        "era": s.get("era"),
                        "protocol_version": s.get("protocol_version"),
                    },
                    "counts": counts,
                    "failed": bool(bad),
                    "findings": [finding_json(r) for r in shown],
                }
            )
            continue
        print(session_line(s))
        for r in shown:
            print(finding_text(r, detail=not brief))
        print(
            f"  {len(rows)} finding(s): {counts['error']} error, {counts['warning']} warning,"
            f" {counts['info']} info"
        )
    if fmt == CheckFormat.json:
        print(json.dumps(docs, indent=2, ensure_ascii=False, default=str))
    if fmt == CheckFormat.junit:
        from mcp_proxy.recording.junit import check_junit

        sys.stdout.flush()
        # ``check_junit`` (recording/junit.py) still names its session rows ``dict[str, Any]``.
        junit_cases = cast("list[tuple[dict[str, Any], list[dict[str, Any]]]]", cases)
        sys.stdout.buffer.write(check_junit(junit_cases, fail_on.value))
        sys.stdout.buffer.flush()
    if failing:
        fail(
            f"{failing} finding(s) at or above {fail_on.value} in {failing_sessions} session(s)",
            EXIT_FINDINGS,
        )


def _context_cost(store: DirectStore, session_id: str) -> dict[str, Any] | None:
    """What the session's last answered ``tools/list`` costs a model's context (estimated,
    :mod:`mcp_proxy.tokens`); None when the session has none."""
    from mcp_proxy import tokens
    from mcp_proxy.limits import COST_PARSE_LIMIT
    from mcp_proxy.render import parse_json_safely

    answered = store.tools_list_answers(session_id)
    if not answered:
        return None
    last = answered[-1]
    result = None
    if int(last["size"]) <= COST_PARSE_LIMIT:
        raw = store.frame_raw(session_id, last["seq"])
        msg = parse_json_safely(raw) if raw is not None else None
        result = msg.get("result") if isinstance(msg, dict) else None
    cost = tokens.listing_cost(int(last["size"]), result, len(answered))
    if cost["tools"] is not None:
        cost["tools"] = cost["tools"][:STATS_TOP_TOOLS]
    return {"session": session_id, "response_seq": last["seq"], **cost}


def _cost_line(cost: dict[str, Any]) -> str:
    from mcp_proxy import tokens

    line = f"context cost of tools/list ({tokens.METHOD}): ~{cost['tokens']} tokens"
    if cost["tools"] is not None:
        dear = ", ".join(f"{t['name']} ~{t['tokens']}" for t in cost["tools"][:3])
        line += f", {cost['tool_count']} tool(s)" + (f"; dearest: {dear}" if dear else "")
    return line


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v / 1000:.2f}s"
    return f"{v:.1f}"


@app.command()
@handle_errors
def stats(
    sessions: Annotated[
        list[str] | None,
        typer.Argument(help="Session id prefixes or names; default: recent sessions."),
    ] = None,
    db: DbOption = None,
    fmt: Annotated[Format, typer.Option("--format", help="text or json.")] = Format.text,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Only sessions with this name.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Sessions started after (10m, 2h, 3d, ISO time).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", help="At most this many sessions without SESSION.")
    ] = 50,
    by_name: Annotated[
        bool, typer.Option("--by-name", help="Split tools/call, prompts/get… by tool/prompt/URI.")
    ] = False,
    recompute: Annotated[
        bool,
        typer.Option(
            "--recompute", help="Re-read the sessions even if stored numbers are current."
        ),
    ] = False,
) -> None:
    """Per-method counts, error rates and latency p50/p95/p99 (one session or across many).

    The numbers are those stored when each session ended; a session without current ones (or
    every session, with --recompute) is read again first, and its numbers stored.
    """
    json_errors(fmt)
    since_ts, max_rows = parse_time(since), check_limit(limit)
    from mcp_proxy.analysis.service import stats_of_sessions
    from mcp_proxy.render import cli_name

    # Through the driver (no event loop, no async store: on SQLite no SQLAlchemy); each
    # session's numbers as stored when it ended (recomputed first only when stale), so a big
    # session costs a read, not a pass over its frames.
    url, direct = open_direct(db)
    with direct:
        rows: list[SessionRow] = []
        if sessions:
            for ref in sessions:
                s = direct.resolve_session(ref)
                if all(r["id"] != s["id"] for r in rows):
                    rows.append(s)
        else:
            rows = direct.list_sessions(name=name, since=since_ts, limit=max_rows)
        costs = [c for s in rows if (c := _context_cost(direct, s["id"])) is not None]
    table = stats_of_sessions(url, rows, by_name=by_name, recompute=recompute)
    if fmt == Format.json:
        print(
            json.dumps(
                {
                    "sessions": [{"id": s["id"], "name": s.get("name")} for s in rows],
                    "methods": [st.as_dict() for st in table],
                    "context_cost": costs,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return
    if not rows:
        print(f"no sessions recorded yet (try: {cli_name()} demo)", file=sys.stderr)
        return
    print(f"{len(rows)} session(s)")
    head = (
        f"{'method':34} {'dir':3} {'calls':>6} {'ok':>6} {'err':>5} {'err%':>6} {'tool_err':>8}"
        f" {'no_resp':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    print(head)
    for st in table:
        d = st.as_dict()
        lat = d["latency_ms"]
        label = st.method + (f" {st.name}" if st.name else "")
        arrow = "→" if st.direction == "c2s" else "←"
        print(
            f"{label[:34]:34} {arrow:3} {st.count:>6} {st.ok:>6} {st.errors:>5}"
            f" {st.error_rate * 100:>5.1f}% {st.tool_errors:>8} {st.unanswered:>7}"
            f" {_fmt_ms(lat['p50']):>8} {_fmt_ms(lat['p95']):>8} {_fmt_ms(lat['p99']):>8}"
            f" {_fmt_ms(lat['max']):>8}"
        )
        task = d.get("task_ms")
        if task:  # the task's own life (creation → terminal status), apart from the handle's
            print(
                f"{'  ↳ task duration':34} {'':3} {task['n']:>6} {'':6} {'':5} {'':6} {'':8}"
                f" {'':7} {_fmt_ms(task['p50']):>8} {_fmt_ms(task['p95']):>8}"
                f" {_fmt_ms(task['p99']):>8} {_fmt_ms(task['max']):>8}"
            )
        if d.get("dropped"):  # past limits.STATS_VALUES_KEPT distinct values
            print(
                f"{'':38}↳ {d['dropped']} latencies left out of the percentiles"
                f" (more than {STATS_VALUES_KEPT:,} distinct values)"
            )
    for cost in costs:
        prefix = f"{cost['session'][:8]}: " if len(rows) > 1 else ""
        print(prefix + _cost_line(cost))
