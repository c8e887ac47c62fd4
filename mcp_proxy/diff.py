"""Semantic diff of two MCP conversations, exchange by exchange.

Two recordings of "the same" conversation never match byte for byte: ids, timestamps, session
ids, progress tokens, sealed MRTR ``requestState`` and ``_meta`` envelopes always differ. What a
person (or CI) wants to know is whether the *conversation* differs: the same requests, in the
same order, answered with the same results, errors and notifications. So:

1. each session becomes a list of :class:`Step` (an exchange as pairing defines it, or a lone
   notification) — the pairing comes from :mod:`mcp_proxy.analysis` (see :func:`conversation`);
2. every JSON value is normalised: the default ignores plus ``--ignore`` JSONPaths are removed
   (or masked, for values whose presence matters but whose content is opaque);
   a task's ``tasks/get`` polls fold into its last one (:func:`fold_task_polls`: how often a
   host polls is timing);
3. the two step lists are aligned like sequences (same direction and method required, params
   similarity breaks ties), and aligned steps are compared as JSON.

Everything here is pure: no I/O, no clocks, tested without sockets.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from mcp_proxy.normalize import (
    DEFAULT_IGNORES,
    DEFAULT_MASKS,
    MAX_DEPTH,
    NEVER_COMPARED,
    Normalizer,
    canonical,
    clip_depth,
)
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.store.rows import utf8_text

# ============================================================================ conversations


def comparable(method: str) -> str:
    """A method as the database holds it: a lone surrogate (``"\\ud800"`` in the frame's JSON,
    not UTF-8) as the six characters ``\\ud800``. A session read from a file has the method its
    bytes say, the same session in the database the stored one: compared this way, a session
    and its own export are the same."""
    return utf8_text(method) if type(method) is str else method


@dataclass
class Step:
    """One unit of a conversation: an exchange (request + outcome) or a lone notification.

    ``direction`` is the request's (``c2s``: the host asked; ``s2c``: the server asked).
    ``outcome`` is ``result``, ``error``, ``none`` (never answered) or ``notification``.
    """

    direction: str
    method: str
    params: Any
    outcome: str
    result: Any = None
    error: Any = None
    notifications: list[dict[str, Any]] = field(default_factory=list)
    #: Frame sequence numbers (request first) so a report can point at the evidence.
    seqs: list[int] = field(default_factory=list)
    request_id: str | None = None
    #: True when the result is an MRTR ``input_required`` round (the chain continues).
    input_required: bool = False
    #: What the other side sent while this request was open, in wire order, as
    #: ``("notify", message)`` / ``("ask", message)`` (a nested request): what a mock replays.
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: The recorded response message (for a mock to answer with), None when unanswered.
    response: dict[str, Any] | None = None
    #: True when a compared value nested beyond :data:`MAX_DEPTH` and was clipped to a digest.
    too_deep: bool = False
    #: Milliseconds from the request to its answer as recorded (None: unanswered or unknown);
    #: never compared, reported (a replay's JUnit case time).
    latency_ms: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        """What two steps must share to be aligned: direction and method (:func:`comparable`)."""
        return self.direction, comparable(self.method)

    def clip(self) -> Step:
        """Clip the compared values to :data:`MAX_DEPTH` (in place); ``events``/``response``
        keep the recorded messages whole, for a mock to serve them as they were."""
        clipped = False
        for name in ("params", "result", "error", "notifications"):
            value, deep = clip_depth(getattr(self, name))
            if deep:
                setattr(self, name, value)
                clipped = True
        self.too_deep = self.too_deep or clipped
        return self

    def document(self) -> dict[str, Any]:
        """The JSON the diff compares (before normalisation)."""
        doc: dict[str, Any] = {"method": comparable(self.method), "params": self.params}
        if self.outcome == "result":
            doc["result"] = self.result
        elif self.outcome == "error":
            doc["error"] = self.error
        elif self.outcome == "none":
            doc["noResponse"] = True
        if self.notifications:
            doc["notifications"] = self.notifications
        return doc

    @property
    def title(self) -> str:
        arrow = "→" if self.direction == "c2s" else "←"
        label = self.method
        if self.method in ("tools/call", "prompts/get") and isinstance(self.params, dict):
            label += f" {self.params.get('name')}"
        elif self.method == "resources/read" and isinstance(self.params, dict):
            label += f" {self.params.get('uri')}"
        return f"{arrow} {label}"


def conversation(session: SessionRecording) -> list[Step]:
    """A session's steps in the order the requests were sent.

    Pairing is :func:`mcp_proxy.analysis.exchanges.pair`, the one pairing of the project (ids
    keyed by direction, progress by token, notifications to the request in flight); this only
    turns its exchanges into diffable steps.
    """
    from mcp_proxy.analysis.exchanges import decode, pair, session_facts

    frames, unparsable = parsable_frames(session.frames)
    msgs = decode(frames)
    http = {ex["id"]: ex for ex in session.exchanges}
    pairing = pair(msgs, session_facts(msgs, session.session, http), http)
    by_seq: dict[int, list[Any]] = {}
    for m in msgs:
        by_seq.setdefault(m.seq, []).append(m)
    exchanges = list(pairing.exchanges)
    attached: set[int] = set()
    items: list[tuple[int, Step]] = []
    for ex in exchanges:
        req = ex.request.body if ex.request is not None else None
        if not isinstance(req, dict):
            continue
        step = Step(
            ex.direction,
            ex.method,
            req.get("params"),
            "none",
            seqs=[ex.request_seq],
            request_id=ex.msg_id,
            latency_ms=ex.latency_ms,
        )
        attached.add(ex.request_seq)
        resp = ex.response.body if ex.response is not None else None
        if isinstance(resp, dict):
            step.response = resp
            if ex.response_seq is not None:
                step.seqs.append(ex.response_seq)
                attached.add(ex.response_seq)
            if "error" in resp:
                step.outcome, step.error = "error", resp.get("error")
            else:
                step.outcome, step.result = "result", resp.get("result")
                res = step.result
                step.input_required = isinstance(res, dict) and (
                    res.get("resultType") == "input_required"
                )
        events: list[tuple[int, str, dict[str, Any]]] = []
        for seq in [*ex.progress_seqs, *ex.log_seqs, *ex.other_seqs]:
            for m in by_seq.get(seq, []):
                if (
                    m.kind == "notification"
                    and isinstance(m.body, dict)
                    and m.direction != ex.direction
                ):
                    events.append((seq, "notify", m.body))
                    attached.add(seq)
        for child in ex.children:
            sub = exchanges[child] if 0 <= child < len(exchanges) else None
            if sub is not None and sub.request is not None and isinstance(sub.request.body, dict):
                events.append((sub.request_seq, "ask", sub.request.body))
        events.sort(key=lambda e: e[0])
        step.events = [(kind, body) for _, kind, body in events]
        step.notifications = [
            {"method": body.get("method"), "params": body.get("params")}
            for kind, body in step.events
            if kind == "notify"
        ]
        step.seqs.extend(seq for seq, kind, _ in events if kind == "notify")
        items.append((ex.request_seq, step))
    for m in msgs:
        if m.kind == "notification" and m.seq not in attached and isinstance(m.body, dict):
            items.append(
                (
                    m.seq,
                    Step(
                        m.direction,
                        str(m.method),
                        m.body.get("params"),
                        "notification",
                        seqs=[m.seq],
                    ),
                )
            )
    by_seq_frame = {f["seq"]: f for f in session.frames} if unparsable else {}
    for seq in unparsable:
        # Too deep for the JSON parser: an opaque step (a digest of its bytes), so the diff
        # still says it was there and whether it changed.
        f = by_seq_frame[seq]
        digest = {"sha256": hashlib.sha256(bytes(f["raw"] or b"")).hexdigest()[:16]}
        opaque = Step(f["direction"], UNPARSABLE, digest, "notification", seqs=[seq])
        opaque.too_deep = True
        items.append((seq, opaque))
    # Wire order: when each step's first frame was seen. Sequence numbers are the recorder's
    # arrival order, which for concurrent HTTP requests need not be the order they were sent.
    seen_at = {f["seq"]: f.get("ts") or 0.0 for f in session.frames}
    items.sort(key=lambda t: (seen_at.get(t[0], 0.0), t[0]))
    return [step.clip() for _, step in items]


#: The method shown for a frame nested too deep to parse (one opaque step in the diff).
UNPARSABLE = "<too deep to parse>"
#: A frame needs at least this many brackets to nest deep enough to defeat the JSON parser
#: (~1,500 levels); cheaper to count than to parse, so only suspects are parsed twice.
_SUSPECT_BRACKETS = 1_000


def parsable_frames(frames: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The frames with those too deep to parse turned opaque (kind ``invalid``, no body).

    A frame nested ~1,500 levels is recorded byte-exact, but ``json.loads`` raises
    ``RecursionError`` on it, and every reader that parses it would fail the whole command.
    Returns the frames to analyse and the sequence numbers of those made opaque.
    """
    out: list[dict[str, Any]] = []
    unparsable: list[int] = []
    for f in frames:
        raw = f.get("raw")
        if f.get("kind") == "undecodable":  # the recorder already found it too deep to parse
            out.append(f)
            unparsable.append(int(f["seq"]))
            continue
        if (
            isinstance(raw, bytes | bytearray | memoryview)
            and f.get("kind") in ("request", "response", "error", "notification", "batch")
            and bytes(raw).count(b"[") + bytes(raw).count(b"{") >= _SUSPECT_BRACKETS
        ):
            try:
                json.loads(bytes(raw))
            except RecursionError:
                out.append({**f, "kind": "invalid", "raw": b"", "method": None, "msg_id": None})
                unparsable.append(int(f["seq"]))
                continue
            except ValueError:
                pass
        out.append(f)
    return out, unparsable


# ============================================================================ tasks

#: A task's status notification: sent when a change is seen, so timing decides how many.
TASK_STATUS_NOTE = "notifications/tasks/status"
#: Task fields that are clocks (never compared, like every timestamp).
TASK_CLOCKS = frozenset({"createdAt", "lastUpdatedAt"})


def task_handle_id(step: Step) -> str | None:
    """The task id a ``tools/call`` answered with a task handle (either era), else ``None``."""
    res = step.result
    if step.method != "tools/call" or not isinstance(res, dict):
        return None
    if res.get("resultType") == "task":
        task_id = res.get("taskId")
    elif isinstance(res.get("task"), dict):
        task_id = res["task"].get("taskId")
    else:
        return None
    return task_id if isinstance(task_id, str) else None


def _task_param(step: Step) -> str | None:
    task_id = step.params.get("taskId") if isinstance(step.params, dict) else None
    return task_id if isinstance(task_id, str) else None


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with task ids replaced by their ordinal and task clocks left out (iterative)."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, node = stack.pop()
        if isinstance(node, str) and node in names:
            parent[key] = names[node]
        elif isinstance(node, dict):
            copy = {k: v for k, v in node.items() if k not in TASK_CLOCKS}
            parent[key] = copy
            stack.extend((copy, k, v) for k, v in copy.items())
        elif isinstance(node, list):
            items = list(node)
            parent[key] = items
            stack.extend((items, i, v) for i, v in enumerate(items))
    return root[0]


def fold_task_polls(steps: list[Step]) -> tuple[list[Step], list[tuple[str, int]]]:
    """A task conversation as it is compared: created, updated, cancelled, and its final state.

    How often a host polls ``tasks/get`` (and so which intermediate statuses it saw, and when
    ``notifications/tasks/status`` went out) is timing, not conversation: each task's polls
    fold into its last one, status notifications are left out, and task ids (per run) and task
    clocks are compared as ``<task N>`` in creation order. Returns the steps and, per task,
    ``(ordinal, polls)`` so a report can say the counts differ without calling it a change.
    """
    names: dict[str, str] = {}
    for st in steps:
        task_id = task_handle_id(st)
        if task_id is not None and task_id not in names:
            names[task_id] = f"<task {len(names) + 1}>"
    if not names:
        return steps, []
    last_poll: dict[str, int] = {}
    polls: dict[str, int] = dict.fromkeys(names.values(), 0)
    for i, st in enumerate(steps):
        task_id = _task_param(st)
        if st.method == "tasks/get" and task_id in names:
            last_poll[task_id] = i
            polls[names[task_id]] += 1
    out: list[Step] = []
    for i, st in enumerate(steps):
        task_id = _task_param(st)
        if st.method == TASK_STATUS_NOTE or (
            st.method == "tasks/get" and task_id in names and last_poll[task_id] != i
        ):
            continue
        if task_id in names or task_handle_id(st) is not None:
            st.params, st.result, st.error = (
                _renamed(st.params, names),
                _renamed(st.result, names),
                _renamed(st.error, names),
            )
        st.notifications = [n for n in st.notifications if n.get("method") != TASK_STATUS_NOTE]
        out.append(st)
    return out, sorted(polls.items())


# ============================================================================ comparing


@dataclass
class Change:
    """One difference inside an aligned pair: a JSON path and the two values (absent = None)."""

    path: str
    kind: str  # changed | added | removed
    a: Any = None
    b: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "kind": self.kind}
        if self.kind != "added":
            out["a"] = self.a
        if self.kind != "removed":
            out["b"] = self.b
        return out


def json_changes(a: Any, b: Any, path: str = "$") -> list[Change]:
    """Where two JSON values differ (dict keys by name, lists by position; order-free keys)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[Change] = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if re.fullmatch(r"[A-Za-z_][\w]*", str(k)) else f"{path}[{k!r}]"
            if k not in b:
                out.append(Change(p, "removed", a=a[k]))
            elif k not in a:
                out.append(Change(p, "added", b=b[k]))
            else:
                out.extend(json_changes(a[k], b[k], p))
        return out
    if isinstance(a, list) and isinstance(b, list):
        key = _identity_key(a, b)
        if key is not None:
            return _keyed_changes(a, b, key, path)
        out = []
        for i in range(max(len(a), len(b))):
            p = f"{path}[{i}]"
            if i >= len(b):
                out.append(Change(p, "removed", a=a[i]))
            elif i >= len(a):
                out.append(Change(p, "added", b=b[i]))
            else:
                out.extend(json_changes(a[i], b[i], p))
        return out
    if type(a) is not type(b) and not (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return [Change(path, "changed", a, b)]
    return [] if a == b else [Change(path, "changed", a, b)]


#: Lists whose items carry one of these keys (tools, resources, prompts, templates) are compared
#: item by item by that key, so one changed tool is one change, not a cascade of shifted indices.
IDENTITY_KEYS = ("name", "uri", "uriTemplate")


def _identity_key(a: list[Any], b: list[Any]) -> str | None:
    items = [*a, *b]
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for key in IDENTITY_KEYS:
        values = [x.get(key) for x in items]
        if all(isinstance(v, str) for v in values):
            if len(set(values[: len(a)])) == len(a) and len(set(values[len(a) :])) == len(b):
                return key
    return None


def _keyed_changes(a: list[Any], b: list[Any], key: str, path: str) -> list[Change]:
    by_a = {x[key]: x for x in a}
    by_b = {x[key]: x for x in b}
    out: list[Change] = []
    for name in [*by_a, *(k for k in by_b if k not in by_a)]:
        p = f"{path}[{key}={name}]"
        if name not in by_b:
            out.append(Change(p, "removed", a=by_a[name]))
        elif name not in by_a:
            out.append(Change(p, "added", b=by_b[name]))
        else:
            out.extend(json_changes(by_a[name], by_b[name], p))
    common_a = [x[key] for x in a if x[key] in by_b]
    common_b = [x[key] for x in b if x[key] in by_a]
    if common_a != common_b:
        out.append(Change(f"{path}(order)", "changed", common_a, common_b))
    return out


@dataclass
class Pair:
    """One row of the aligned conversations."""

    status: str  # same | changed | only_a | only_b
    a: Step | None
    b: Step | None
    changes: list[Change] = field(default_factory=list)

    @property
    def title(self) -> str:
        return (self.a or self.b).title  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        def side(s: Step | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"seqs": s.seqs, "id": s.request_id, "outcome": s.outcome}

        return {
            "status": self.status,
            "direction": (self.a or self.b).direction,  # type: ignore[union-attr]
            "method": (self.a or self.b).method,  # type: ignore[union-attr]
            "title": self.title,
            "a": side(self.a),
            "b": side(self.b),
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass
class DiffResult:
    """Two conversations aligned; ``equal`` is what ``diff`` and ``replay`` exit on."""

    a_label: str
    b_label: str
    pairs: list[Pair]
    ignores: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Whether the default ignores and masks applied (what the header lists).
    defaults: bool = True

    @property
    def equal(self) -> bool:
        return all(p.status == "same" for p in self.pairs)

    def counts(self) -> dict[str, int]:
        out = {"same": 0, "changed": 0, "only_a": 0, "only_b": 0}
        for p in self.pairs:
            out[p.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        """What ``diff --format json`` prints and the dashboard's diff page renders."""
        return {
            "equal": self.equal,
            "a": self.a_label,
            "b": self.b_label,
            "counts": self.counts(),
            "ignores": self.ignores,
            "masked": list(DEFAULT_MASKS) if self.defaults else [],
            "never_compared": list(NEVER_COMPARED),
            "notes": self.notes,
            "exchanges": [p.to_json() for p in self.pairs],
        }


def similarity(a: Any, b: Any) -> float:
    if a == b:
        return 1.0
    ta, tb = canonical(a), canonical(b)
    if len(ta) + len(tb) > 20_000:
        return 0.5 if ta[:200] == tb[:200] else 0.0
    return SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def align(
    a: Sequence[Step], b: Sequence[Step], norm: Normalizer
) -> list[tuple[int | None, int | None]]:
    """Align two step lists: a maximum-weight common subsequence (same direction + method).

    Weight = 1 + params similarity, so among equal-method candidates the closest params win;
    unmatched steps come out as one-sided rows in conversation order.
    """
    ka = [s.key for s in a]
    kb = [s.key for s in b]
    pa = [norm(s.params) for s in a]
    pb = [norm(s.params) for s in b]
    n, m = len(a), len(b)
    if n * m > 4_000_000:  # very long sessions: greedy by method blocks
        pairs: list[tuple[int | None, int | None]] = []
        sm = SequenceMatcher(None, ka, kb, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                pairs.extend(zip(range(i1, i2), range(j1, j2), strict=True))
            else:
                pairs.extend((i, None) for i in range(i1, i2))
                pairs.extend((None, j) for j in range(j1, j2))
        return pairs
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = score[i], score[i + 1]
        for j in range(m - 1, -1, -1):
            best = max(below[j], row[j + 1])
            if ka[i] == kb[j]:
                best = max(best, 1.0 + similarity(pa[i], pb[j]) + below[j + 1])
            row[j] = best
    out: list[tuple[int | None, int | None]] = []
    i = j = 0
    while i < n and j < m:
        if (
            ka[i] == kb[j]
            and abs(score[i][j] - (1.0 + similarity(pa[i], pb[j]) + score[i + 1][j + 1])) < 1e-9
        ):
            out.append((i, j))
            i += 1
            j += 1
        elif score[i + 1][j] >= score[i][j + 1]:
            out.append((i, None))
            i += 1
        else:
            out.append((None, j))
            j += 1
    out.extend((k, None) for k in range(i, n))
    out.extend((None, k) for k in range(j, m))
    return out


def diff_steps(
    a: Sequence[Step],
    b: Sequence[Step],
    *,
    ignores: Iterable[str] = (),
    a_label: str = "A",
    b_label: str = "B",
    defaults: bool = True,
) -> DiffResult:
    """Align and compare two conversations (pure)."""
    extra = list(ignores)
    norm = Normalizer.build(extra, defaults=defaults)
    pairs: list[Pair] = []
    for i, j in align(a, b, norm):
        if i is None:
            pairs.append(Pair("only_b", None, b[j]))  # type: ignore[index]
            continue
        if j is None:
            pairs.append(Pair("only_a", a[i], None))
            continue
        changes = json_changes(norm(a[i].document()), norm(b[j].document()))
        pairs.append(Pair("changed" if changes else "same", a[i], b[j], changes))
    pairs = _rejoin_moved(pairs, norm)
    return DiffResult(
        a_label,
        b_label,
        pairs,
        ignores=[*(DEFAULT_IGNORES if defaults else ()), *extra],
        defaults=defaults,
    )


def _rejoin_moved(pairs: list[Pair], norm: Normalizer) -> list[Pair]:
    """Pair up one-sided rows of the same direction and method that the alignment left apart.

    The recorder copies each direction from its own thread after forwarding, so the order of two
    frames going opposite ways within a few microseconds is not causal: a server's nested
    ``roots/list`` can land before or after the host's next request. A step that merely moved
    is compared in place of the one it matches instead of being reported twice.
    """
    only_b = [k for k, p in enumerate(pairs) if p.status == "only_b"]
    used: set[int] = set()
    out: list[Pair] = []
    for p in pairs:
        if p.status == "only_a" and p.a is not None:
            key = p.a.key
            match = next(
                (
                    k
                    for k in only_b
                    if k not in used and (b := pairs[k].b) is not None and b.key == key
                ),
                None,
            )
            if match is not None:
                used.add(match)
                b = pairs[match].b
                changes = json_changes(norm(p.a.document()), norm(b.document()))  # type: ignore[union-attr]
                out.append(Pair("changed" if changes else "same", p.a, b, changes))
                continue
        out.append(p)
    dropped = {id(pairs[k]) for k in used}
    return [p for p in out if id(p) not in dropped]


def diff_sessions(
    a: SessionRecording,
    b: SessionRecording,
    *,
    ignores: Iterable[str] = (),
    a_label: str | None = None,
    b_label: str | None = None,
) -> DiffResult:
    """Diff two recorded sessions (from files or the database). The dashboard calls this."""
    steps_a, polls_a = fold_task_polls(conversation(a))
    steps_b, polls_b = fold_task_polls(conversation(b))
    result = diff_steps(
        steps_a,
        steps_b,
        ignores=ignores,
        a_label=a_label or a.label,
        b_label=b_label or b.label,
    )
    if polls_a != polls_b and polls_a and polls_b:
        counts = "; ".join(
            f"{name}: {dict(polls_a).get(name, 0)} vs {dict(polls_b).get(name, 0)}"
            for name in sorted({n for n, _ in [*polls_a, *polls_b]})
        )
        result.notes.append(
            f"tasks were polled a different number of times ({counts}); polls are timing,"
            " so each task is compared by its final state"
        )
    for p in result.pairs:
        for side, step in (("a", p.a), ("b", p.b)):
            if step is not None and step.method == UNPARSABLE:
                result.notes.append(
                    f"{side}: frame #{step.seqs[0]} nests too deep to parse; it is one opaque"
                    " step, and an answer it carried counts as missing"
                )
            elif step is not None and step.too_deep:
                result.notes.append(
                    f"{side}: {step.title} (frame #{step.seqs[0]}) nests deeper than {MAX_DEPTH}"
                    " levels; compared as an opaque digest below that depth"
                )
    ea, eb = a.session.get("era"), b.session.get("era")
    if ea and eb and ea != eb:
        result.notes.append(
            f"the sessions are of different protocol eras ({ea} vs {eb}); the handshakes differ"
        )
    return result


# ============================================================================ rendering


def _short(value: Any, width: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(result: DiffResult, *, context: bool = False, max_changes: int = 20) -> str:
    """A readable report: one line per exchange that differs (all of them with ``context``)."""
    from mcp_proxy.render import safe

    lines = [f"--- a: {safe(result.a_label)}", f"+++ b: {safe(result.b_label)}"]
    ignored = [*NEVER_COMPARED, *result.ignores]
    masked = f"; opaque: {', '.join(DEFAULT_MASKS)}" if result.defaults else ""
    lines.append(f"ignored: {safe(', '.join(ignored))}{masked}")
    for note in result.notes:
        lines.append(f"note: {note}")
    for n, p in enumerate(result.pairs, start=1):
        if p.status == "same":
            if context:
                lines.append(f"  {n:>3}  = {safe(p.title)}")
            continue
        if p.status == "only_a":
            lines.append(f"  {n:>3}  - {safe(p.title)}   (only in a, frame #{p.a.seqs[0]})")  # type: ignore[union-attr]
            continue
        if p.status == "only_b":
            lines.append(f"  {n:>3}  + {safe(p.title)}   (only in b, frame #{p.b.seqs[0]})")  # type: ignore[union-attr]
            continue
        seq_a, seq_b = p.a.seqs[0], p.b.seqs[0]  # type: ignore[union-attr]
        lines.append(f"  {n:>3}  ~ {safe(p.title)}   (a #{seq_a}, b #{seq_b})")
        for c in p.changes[:max_changes]:
            if c.kind == "removed":
                lines.append(f"         {safe(c.path)}: -{safe(_short(c.a))}")
            elif c.kind == "added":
                lines.append(f"         {safe(c.path)}: +{safe(_short(c.b))}")
            else:
                lines.append(f"         {safe(c.path)}: {safe(_short(c.a))} → {safe(_short(c.b))}")
        if len(p.changes) > max_changes:
            lines.append(f"         … {len(p.changes) - max_changes} more")
    counts = result.counts()
    if result.equal:
        lines.append(f"no differences ({counts['same']} exchanges)")
    else:
        lines.append(
            f"{counts['changed']} changed, {counts['only_a']} only in a, {counts['only_b']} only"
            f" in b, {counts['same']} the same"
        )
    return "\n".join(lines)
