"""Matching a live request to a recorded exchange (pure): :class:`MockIndex`.

- Matching is on method + canonical params: key order ignored, the id never part of the key,
  ``_meta`` and progress tokens ignored, MRTR ``requestState`` compared as "present" (it is
  sealed per server process), more ignores by ``--ignore JSONPATH``. ``initialize`` and
  ``server/discover`` match on the method alone: every client describes itself differently.
- A recorded value the recorder redacted (``[REDACTED]``) matches any live value there: the
  real value was never stored, so it cannot be compared. :attr:`MockIndex.redacted` lists them.
- Repeats: identical recorded requests are served in recorded order, and the last one keeps
  answering (``repeat_last=False`` makes a used-up match a miss instead).
- Tasks (both eras): the task-augmented call is served its recorded handle like any request,
  and the task's ``tasks/get`` polls their recorded answers in recorded order — a poll beyond
  the recorded ones repeats the last status (even with ``repeat_last=False``: how often a
  client polls is timing, not a different request). Once the live client has been told the
  task is over (a terminal status, the ``tasks/result`` answer, a ``tasks/cancel``
  acknowledgement), every later poll gets the last recorded *terminal* answer for it (else the
  answer that ended it, when that is a Task — a 2025-11-25 ``tasks/cancel`` result): the
  status never moves backwards out of a terminal state because the live client polled less
  than the recorded one.
- A miss explains itself: the nearest recorded requests and how each differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.diff import Step, conversation, json_changes, similarity
from mcp_proxy.normalize import Normalizer, canonical, clip_depth
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.redact import REDACTED

#: JSON-RPC error code of a miss on a method that *was* recorded (server-defined range).
MISS_CODE = -32050
METHOD_NOT_FOUND = -32601
#: Requests matched on the method alone.
HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})
#: Task polls: repeated by timing, so the last recorded answer repeats whatever the options.
TASK_POLLS = frozenset({"tasks/get", "tasks/result"})
#: Answers that tell the live client a task is over.
TASK_ENDERS = frozenset({"tasks/result", "tasks/cancel"})
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})

Path = tuple[str | int, ...]


@dataclass
class Entry:
    """One recorded exchange the mock can serve."""

    step: Step
    key: str
    norm_params: Any
    origin: str  # "session#seq" for messages
    uses: int = 0
    #: Where the recorded params hold ``[REDACTED]`` (matched as any value).
    redacted: list[Path] = field(default_factory=list)


@dataclass
class Miss:
    """Why nothing matched, shaped as the error ``data`` the client receives."""

    method: str
    params: Any
    method_known: bool
    nearest: list[dict[str, Any]] = field(default_factory=list)
    exhausted: bool = False

    def error(self) -> dict[str, Any]:
        if not self.method_known:
            message = f"mcptape mock: {self.method!r} was never recorded"
            code = METHOD_NOT_FOUND
        elif self.exhausted:
            message = f"mcptape mock: every recorded answer to this {self.method} was already used"
            code = MISS_CODE
        else:
            message = f"mcptape mock: no recorded {self.method} request matches these params"
            code = MISS_CODE
        return {
            "code": code,
            "message": message,
            "data": {
                "mcptape": "mock-miss",
                "method": self.method,
                "params": self.params,
                "exhausted": self.exhausted,
                "nearest": self.nearest,
            },
        }


def redacted_paths(value: Any) -> list[Path]:
    """Where ``value`` holds the recorder's ``[REDACTED]`` marker (iterative walk)."""
    out: list[Path] = []
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        node, where = stack.pop()
        if node == REDACTED:
            out.append(where)
        elif isinstance(node, dict):
            stack.extend((v, (*where, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(node))
    return sorted(out, key=str)


def _masked(value: Any, paths: Sequence[Path]) -> Any:
    """A copy of ``value`` with each path that exists set to ``[REDACTED]``."""
    for path in paths:
        value = _set(value, path)
    return value


def _set(node: Any, path: Path) -> Any:
    if not path:
        return REDACTED
    head, rest = path[0], path[1:]
    if isinstance(node, dict) and isinstance(head, str) and head in node:
        return {**node, head: _set(node[head], rest)}
    if isinstance(node, list) and isinstance(head, int) and 0 <= head < len(node):
        return [*node[:head], _set(node[head], rest), *node[head + 1 :]]
    return node


def _adopt_stray_notifications(steps: list[Step]) -> None:
    """Give a request the server notifications sent while it alone was open.

    Pairing attaches logs and progress to the request whose stream carried them; on the legacy
    HTTP+SSE transport every message rides the one GET stream, so a log sent while a tool ran
    stays a lone step. When exactly one host request was open, it is the one the server was
    working on: the mock sends those notifications before that request's answer, as recorded.
    """
    open_windows = [
        (st.seqs[0], st.seqs[1], st)
        for st in steps
        if st.direction == "c2s" and st.outcome in ("result", "error") and len(st.seqs) > 1
    ]
    for st in steps:
        if st.outcome != "notification" or st.direction != "s2c" or not st.seqs:
            continue
        seq = st.seqs[0]
        around = [w for w in open_windows if w[0] < seq < w[1]]
        if len(around) == 1:
            owner = around[0][2]
            note = {"jsonrpc": "2.0", "method": st.method}
            if st.params is not None:
                note["params"] = st.params
            owner.events.append(("notify", note))


def _task_id(params: Any) -> str | None:
    task_id = params.get("taskId") if isinstance(params, dict) else None
    return task_id if isinstance(task_id, str) else None


def _status(entry: Entry) -> Any:
    """The task status a recorded answer carries (a Task result), else ``None``."""
    result = (entry.step.response or {}).get("result")
    return result.get("status") if isinstance(result, dict) else None


def show_path(path: Path) -> str:
    return "$.params" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


class MockIndex:
    """Recorded host requests by (method, canonical params), served in order."""

    def __init__(
        self,
        sessions: Sequence[SessionRecording],
        *,
        ignores: Sequence[str] = (),
        repeat_last: bool = True,
    ) -> None:
        self.norm = Normalizer.build(ignores)
        self.repeat_last = repeat_last
        #: Task ids the live client has been told are over, with the answer that told it.
        self.ended_tasks: dict[str, Entry] = {}
        self.entries: dict[tuple[str, str], list[Entry]] = {}
        self.by_method: dict[str, list[Entry]] = {}
        #: "method $.params.path" of every recorded field the recorder redacted.
        self.redacted: list[str] = []
        for s in sessions:
            self.add_session(s)

    def key_of(self, method: str, params: Any) -> tuple[str, Any]:
        if method in HANDSHAKE_METHODS:
            return "", None
        clipped, _ = clip_depth(params if params is not None else {})
        norm = self.norm(clipped)
        return canonical(norm), norm

    def add_session(self, s: SessionRecording) -> None:
        steps = conversation(s)
        _adopt_stray_notifications(steps)
        for step in steps:
            if step.direction != "c2s" or step.outcome == "notification" or step.response is None:
                continue
            key, norm = self.key_of(step.method, step.params)
            entry = Entry(step, key, norm, f"{s.id[:8]}#{step.seqs[0]}")
            entry.redacted = redacted_paths(norm) if step.method not in HANDSHAKE_METHODS else []
            for path in entry.redacted:
                self.redacted.append(f"{step.method} {show_path(path)}")
            self.entries.setdefault((step.method, key), []).append(entry)
            self.by_method.setdefault(step.method, []).append(entry)

    def _candidates(self, method: str, key: str, norm: Any) -> list[Entry]:
        found = self.entries.get((method, key))
        if found:
            return found
        # Recorded requests with redacted fields match whatever the live request has there.
        return [
            e
            for e in self.by_method.get(method, [])
            if e.redacted and canonical(_masked(norm, e.redacted)) == e.key
        ]

    def lookup(self, method: str, params: Any) -> Entry | Miss:
        key, norm = self.key_of(method, params)
        found = self._candidates(method, key, norm)
        if found:
            entry = self._pick(method, params, found)
            if entry is not None:
                entry.uses += 1
                self._note_task(method, params, entry)
                return entry
            return Miss(method, norm, True, self._nearest(method, norm), exhausted=True)
        shown = norm if method not in HANDSHAKE_METHODS else self.norm(clip_depth(params)[0])
        return Miss(method, shown, method in self.by_method, self._nearest(method, norm))

    def _pick(self, method: str, params: Any, found: list[Entry]) -> Entry | None:
        """The next recorded answer; the last again when used up (and allowed), else ``None``."""
        task_poll = method in TASK_POLLS
        ender = self.ended_tasks.get(_task_id(params) or "")
        if task_poll and ender is not None:
            ends = [e for e in found if _status(e) in TERMINAL_STATUSES]
            if ends:
                return ends[-1]
            if method == "tasks/get" and _status(ender) in TERMINAL_STATUSES:
                return ender  # a Task-shaped answer (2025-11-25 tasks/cancel), as tasks/get's
            return found[-1]
        for entry in found:
            if entry.uses == 0:
                return entry
        return found[-1] if self.repeat_last or task_poll else None

    def _note_task(self, method: str, params: Any, entry: Entry) -> None:
        """Remember that the live client now knows the task is over."""
        task_id = _task_id(params)
        if task_id is None or not method.startswith("tasks/"):
            return
        response = entry.step.response or {}
        ended = method == "tasks/result" or (method in TASK_ENDERS and "result" in response)
        if (ended or _status(entry) in TERMINAL_STATUSES) and task_id not in self.ended_tasks:
            self.ended_tasks[task_id] = entry

    def _nearest(self, method: str, norm: Any, limit: int = 3) -> list[dict[str, Any]]:
        candidates = self.by_method.get(method) or [
            e for entries in self.by_method.values() for e in entries
        ]
        seen: set[str] = set()
        scored: list[tuple[float, Entry]] = []
        for e in candidates:
            ident = f"{e.step.method}:{e.key}"
            if ident in seen:
                continue
            seen.add(ident)
            same_method = 1.0 if e.step.method == method else 0.0
            scored.append((same_method + similarity(norm, e.norm_params), e))
        scored.sort(key=lambda t: -t[0])
        return [self._explain(e, method, norm) for _, e in scored[:limit]]

    @staticmethod
    def _explain(e: Entry, method: str, norm: Any) -> dict[str, Any]:
        diffs = [c.to_json() for c in json_changes(e.norm_params, norm, "$.params")][:10]
        if e.step.method != method:
            diffs.insert(
                0, {"path": "$.method", "kind": "changed", "a": e.step.method, "b": method}
            )
        out = {
            "method": e.step.method,
            "params": e.norm_params,
            "recorded_at": e.origin,
            "used": e.uses,
            "differences": diffs,
        }
        if e.redacted:
            out["redacted"] = [show_path(p) for p in e.redacted]
        return out


__all__ = [
    "HANDSHAKE_METHODS",
    "METHOD_NOT_FOUND",
    "MISS_CODE",
    "Entry",
    "Miss",
    "MockIndex",
    "redacted_paths",
]
