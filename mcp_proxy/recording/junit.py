"""JUnit XML for CI: recordings, ``check`` findings and ``replay`` differences as test cases.

CI systems (GitHub Actions reporters, GitLab, Jenkins, Azure, CircleCI) show JUnit XML natively,
so a failed exchange or an error finding appears as a failed test with its reason, not as a
line buried in a log. Three builders share one writer:

- :func:`recording_junit` — the registry's ``junit`` format (``mcptape export -o x.xml``): per
  session a ``<testsuite>``, one ``<testcase>`` per exchange (failed when it ended in a
  JSON-RPC error, a tool error or no answer) and one per finding the analysis makes;
- :func:`check_junit` — for ``mcptape check --format junit``: one test case per finding,
  failed when it is as severe as ``--fail-on``; a clean session is one passing case;
- :func:`replay_junit` — for ``mcptape replay --format junit``: one test case per exchange of
  the recorded conversation, failed when the live server answered differently.

A case's ``time`` is its exchange's latency in seconds, from the recorded request and answer
(a replay: the live server's answer; a finding: the exchange it is about); 0 only when that is
unknown (no answer, a finding about no exchange, or ``check``'s stored findings, which keep no
exchange). A failure's ``message`` is one line for people; its text is one JSON document
(``json.dumps``: the outcome and frames, the finding, or the changes), for tools.

The XML is built with :mod:`xml.etree.ElementTree` (escaping and serialisation done by the
library); characters XML 1.0 cannot hold (NUL and other C0 controls, which recorded bytes may
contain) are replaced. The shape is the de-facto schema (Ant/Jenkins ``junit-4.xsd``):
``testsuites`` > ``testsuite`` (name, tests, failures, errors, skipped, time, timestamp) >
``testcase`` (classname, name, time) > ``failure`` (message, type, text); the tests read it back
with junitparser, as CI tools do.

Why not junitparser as the writer (it was tried, issue #29): it builds the same ElementTree
elements, so it would add a dependency for the schema's ~40 lines of element names here, and
it brings what this writer must avoid: its ``add_testcase`` recounts the whole suite on every
case (quadratic in a session's exchanges), it writes ``time`` as Python's ``str(float)``
(``1e-05`` is no ``xs:decimal``), it switches to lxml's elements when lxml happens to be
installed (other bytes, and lxml refuses the control characters instead of writing them), and
it pretty-prints through ``minidom``, which re-indents the text of a failure.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from mcp_proxy.limits import JUNIT_VALUE_MAX
from mcp_proxy.recording.model import Progress, Recording, SessionRecording, analyse

_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_FINE = frozenset({"ok", "input_required", "closed", "pending"})


def _clean(text: object) -> str:
    """Text XML 1.0 can hold: forbidden characters become U+FFFD."""
    return _BAD_XML.sub("\ufffd", str(text))


def _json_text(doc: object) -> str:
    """A failure's text: one JSON document (a lone surrogate in it becomes U+FFFD in the XML,
    which keeps it JSON; control characters are escaped by ``json.dumps`` already)."""
    return json.dumps(doc, ensure_ascii=False, default=str)


def _bounded(value: Any) -> Any:
    """A compared value as it goes into a failure's JSON: whole up to :data:`JUNIT_VALUE_MAX`
    characters of JSON, else its first characters and its length."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= JUNIT_VALUE_MAX:
        return value
    return {"truncated": text[:JUNIT_VALUE_MAX], "chars": len(text)}


def _seconds(latency_ms: float | None) -> float:
    """A latency in milliseconds as a case's time in seconds (0 when unknown)."""
    return max(0.0, latency_ms) / 1000.0 if latency_ms is not None else 0.0


@dataclass
class Case:
    """One ``<testcase>``: passed unless ``failure`` is set."""

    classname: str
    name: str
    time: float = 0.0
    failure: str | None = None
    failure_type: str | None = None
    details: str = ""
    output: str = ""


@dataclass
class Suite:
    """One ``<testsuite>`` (a session, a check run, a replay)."""

    name: str
    cases: list[Case] = field(default_factory=list)
    timestamp: float | None = None
    properties: dict[str, str] = field(default_factory=dict)


def _suite_element(suite: Suite) -> ET.Element:
    failures = sum(1 for c in suite.cases if c.failure is not None)
    el = ET.Element(
        "testsuite",
        {
            "name": _clean(suite.name),
            "tests": str(len(suite.cases)),
            "failures": str(failures),
            "errors": "0",
            "skipped": "0",
            "time": f"{sum(c.time for c in suite.cases):.6f}",
        },
    )
    if suite.timestamp is not None:
        when = datetime.fromtimestamp(suite.timestamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        el.set("timestamp", when)
    if suite.properties:
        props = ET.SubElement(el, "properties")
        for k, v in suite.properties.items():
            ET.SubElement(props, "property", {"name": _clean(k), "value": _clean(v)})
    for case in suite.cases:
        tc = ET.SubElement(
            el,
            "testcase",
            {
                "classname": _clean(case.classname),
                "name": _clean(case.name),
                "time": f"{case.time:.6f}",
            },
        )
        if case.failure is not None:
            fail = ET.SubElement(
                tc,
                "failure",
                {"message": _clean(case.failure), "type": _clean(case.failure_type or "failure")},
            )
            fail.text = _clean(case.details or _json_text({"message": case.failure}))
        if case.output:
            ET.SubElement(tc, "system-out").text = _clean(case.output)
    return el


def junit_xml(suites: Sequence[Suite], name: str = "mcptape") -> bytes:
    """The suites as one JUnit XML document (UTF-8, with an XML declaration)."""
    root = ET.Element(
        "testsuites",
        {
            "name": _clean(name),
            "tests": str(sum(len(s.cases) for s in suites)),
            "failures": str(sum(1 for s in suites for c in s.cases if c.failure is not None)),
            "errors": "0",
        },
    )
    for suite in suites:
        root.append(_suite_element(suite))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


# ============================================================================ recordings


def _exchange_case(label: str, ex: Any) -> Case:
    target = f" {ex.name}" if ex.name else ""
    case = Case(
        classname=label,
        name=f"#{ex.index} {ex.direction} {ex.method}{target} (id {ex.msg_id})",
        time=_seconds(ex.latency_ms),
    )
    if ex.outcome not in _FINE:
        what = ex.error_message or ex.outcome.replace("_", " ")
        code = f" {ex.error_code}" if ex.error_code is not None else ""
        case.failure = f"{ex.outcome}{code}: {what}"
        case.failure_type = ex.error_class or ex.outcome
        case.details = _json_text(
            {
                "outcome": ex.outcome,
                "error_class": ex.error_class,
                "error_code": ex.error_code,
                "error_message": ex.error_message,
                "request_seq": ex.request_seq,
                "response_seq": ex.response_seq,
                "latency_ms": ex.latency_ms,
            }
        )
    return case


def session_suite(s: SessionRecording) -> Suite:
    """A session's exchanges and findings as a suite (analysed now, from its frames)."""
    analysis = analyse(s)
    label = f"mcptape.{s.session.get('name') or 'session'}.{s.id[:8]}"
    suite = Suite(
        name=f"session {s.label}",
        timestamp=float(s.session.get("started_at") or 0.0),
        properties={
            "mcptape.session.id": s.id,
            "transport": str(s.session.get("transport")),
            "protocol_version": str(s.session.get("protocol_version") or ""),
        },
    )
    suite.cases.extend(_exchange_case(label, ex) for ex in analysis.exchanges)
    by_index = {ex.index: ex for ex in analysis.exchanges}
    for f in analysis.findings:
        about = by_index.get(f.exchange) if f.exchange is not None else None
        case = _finding_case(label + ".findings", f.as_dict(), "error")
        case.time = _seconds(about.latency_ms) if about is not None else 0.0
        suite.cases.append(case)
    return suite


def recording_junit(recording: Recording, progress: Progress | None = None) -> list[bytes]:
    """The registry's writer: one suite per session."""
    suites = []
    for s in recording.sessions:
        suites.append(session_suite(s))
        if progress is not None:
            progress(len(s.frames))
    return [junit_xml(suites)]


# ============================================================================ check


def _finding_case(classname: str, f: dict[str, Any], fail_on: str) -> Case:
    from mcp_proxy.analysis.catalogue import at_least

    severity = str(f.get("severity") or "info")
    seqs = f.get("frame_seqs") or []
    case = Case(
        classname=classname,
        name=f"{f.get('code')} ({severity}) {f.get('title') or ''}".strip(),
        output=f"frames {', '.join(map(str, seqs))}" if seqs else "",
    )
    if fail_on != "never" and at_least(severity, fail_on):
        case.failure = str(f.get("title") or f.get("code"))
        case.failure_type = str(f.get("code"))
        case.details = _json_text(
            {
                "code": f.get("code"),
                "severity": severity,
                "title": f.get("title"),
                "detail": f.get("detail"),
                "frame_seqs": list(seqs),
                "exchange": f.get("exchange"),
            }
        )
    return case


def check_junit(
    results: Iterable[tuple[dict[str, Any], Sequence[dict[str, Any]]]],
    fail_on: str = "error",
) -> bytes:
    """``mcptape check --format junit``: per session a suite, one case per finding.

    ``results`` are ``(session row, finding rows)`` as ``check`` gathers them; a finding fails
    its case when it is ``fail_on`` or worse (``never``: nothing fails).
    """
    suites = []
    for session, rows in results:
        name = session.get("name") or "session"
        label = f"mcptape.check.{name}.{str(session['id'])[:8]}"
        suite = Suite(
            name=f"check {name} ({str(session['id'])[:8]})",
            timestamp=session.get("started_at"),
            properties={"mcptape.session.id": str(session["id"])},
        )
        shown = [r for r in rows if r.get("code") != "analysis.summary"]
        suite.cases.extend(_finding_case(label, r, fail_on) for r in shown)
        if not shown:
            suite.cases.append(Case(classname=label, name="no findings"))
        suites.append(suite)
    return junit_xml(suites, "mcptape check")


# ============================================================================ replay
# What :func:`replay_junit` reads of a comparison, as protocols: ``mcptape.diff.DiffResult``
# satisfies them, and this room (below ``diff.py`` in docs/architecture.md) never imports it.


class ComparedChange(Protocol):
    """One difference inside an aligned pair (``diff.Change``)."""

    def to_json(self) -> dict[str, Any]: ...


class ComparedStep(Protocol):
    """One side of an aligned pair (``diff.Step``)."""

    @property
    def latency_ms(self) -> float | None: ...


class ComparedPair(Protocol):
    """One row of two aligned conversations (``diff.Pair``)."""

    @property
    def status(self) -> str: ...
    @property
    def b(self) -> ComparedStep | None: ...
    @property
    def title(self) -> str: ...
    @property
    def changes(self) -> Sequence[ComparedChange]: ...


class Comparison(Protocol):
    """Two conversations aligned (``diff.DiffResult``)."""

    @property
    def a_label(self) -> str: ...
    @property
    def b_label(self) -> str: ...
    @property
    def pairs(self) -> Sequence[ComparedPair]: ...
    @property
    def notes(self) -> Sequence[str]: ...


def replay_junit(
    result: Comparison | None, name: str = "replay", notes: Sequence[str] = ()
) -> bytes:
    """``mcptape replay --format junit``: one case per exchange of the recorded conversation.

    A case fails when the live server answered differently (or an exchange is missing on one
    side); each problem the replay met (``notes``: no answer in time, the server exited) is a
    failed case of its own. Without a comparison at all (the replay could not run) the notes
    are the only cases.
    """
    label = f"mcptape.replay.{name}"
    title = f"replay {result.a_label} → {result.b_label}" if result else f"replay {name}"
    suite = Suite(name=title)
    for n, pair in enumerate(result.pairs if result else [], start=1):
        live = pair.b  # the case's time: how long the live server took to answer
        case = Case(
            classname=label,
            name=f"#{n} {pair.title}",
            time=_seconds(live.latency_ms) if live is not None else 0.0,
        )
        if pair.status != "same":
            changes = [
                {k: _bounded(v) if k in ("a", "b") else v for k, v in c.to_json().items()}
                for c in pair.changes
            ]
            case.failure = {
                "changed": f"answered differently ({len(changes)} change(s))",
                "only_a": "recorded but not replayed (the live server was not asked or ended)",
                "only_b": "the live conversation has an exchange the recording does not",
            }.get(pair.status, pair.status)
            case.failure_type = pair.status
            case.details = _json_text({"status": pair.status, "changes": changes})
        suite.cases.append(case)
    for note in [*(result.notes if result else []), *notes]:
        problem = Case(classname=label, name=f"problem: {note}", failure_type="problem")
        problem.failure, problem.details = note, _json_text({"problem": note})
        suite.cases.append(problem)
    if not suite.cases:
        suite.cases.append(Case(classname=label, name="nothing to compare"))
    return junit_xml([suite], "mcptape replay")


def _format() -> Any:
    from mcp_proxy.recording.registry import Format

    return Format(
        name="junit",
        title="JUnit XML for CI: one test case per exchange and per finding",
        suffixes=(".junit.xml", ".xml"),
        media_type="application/xml",
        write=recording_junit,
        label="JUnit",
    )


FORMAT = _format()
