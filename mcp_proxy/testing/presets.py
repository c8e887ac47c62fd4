"""Composable behaviours for the MCP test servers that tests, benchmarks and the demo run.

A *preset* is a function that adds tools, resources or prompts to an
:class:`~mcp.server.mcpserver.MCPServer`. Presets are looked up by name in :data:`PRESETS` and
composed with :func:`apply_presets` (``--preset basic,slow,failing`` on the command line), so one
subprocess can exhibit exactly the behaviours a test needs and nothing else. Every misbehaviour
happens only when its tool is *called*, which lets a test choose the moment.

Well-behaved presets:

``basic``
    tools ``echo(text: str)`` → text, ``add(a: float, b: float)`` → sum (structured output),
    ``lookup(region: str, query: str)`` whose ``region`` carries ``x-mcp-header: Region`` (so a
    2026-07-28 HTTP client sends ``Mcp-Param-Region``); resources ``test://readme`` (static text)
    and the template ``test://items/{item_id}``; prompt ``greet(name: str)``.
``slow``
    ``slow(steps: int = 3, delay: float = 0.05)`` reports progress each step and sends one log
    message per step; ``hang(seconds: float = 3600)`` sleeps (for cancellation and "no response"
    tests); ``log(message: str, level: str = "info")`` sends a single log message.
``failing``
    ``fail(message: str = "deliberate failure")`` returns a result with ``isError: true``;
    ``protocol_error(code: int = -32000, message: str = ...)`` answers with a JSON-RPC error.
``sampling``
    ``sample(prompt: str, max_tokens: int = 64)`` sends ``sampling/createMessage`` and
    ``roots()`` sends ``roots/list`` as standalone server→client requests (initialize era; on
    2026-07-28 the SDK has no back-channel for them and the tool reports ``isError``).
``elicitation``
    ``ask(question: str = "What is your name?")`` sends a form ``elicitation/create``
    (initialize era, same caveat).
``mrtr``
    2026-07-28 multi-round-trip tools driven by hand so the wire is predictable:
    ``confirm(action: str)`` answers ``resultType: "input_required"`` with one elicitation
    input request and a ``requestState``, and completes on the retry; ``interview(topic: str)``
    asks for elicitation, sampling and roots in one round; ``countdown(rounds: int = 3)`` makes
    a chain of state-only rounds. In the initialize era they fall back to standalone requests
    (``countdown`` just completes), so the tools work in both eras.

Misbehaving presets:

``noise``
    ``noise(text: str = "this line is not JSON", count: int = 1)`` writes raw non-JSON lines to
    the *real* stdout pipe (the stdio wire) before answering; ``stderr_noise(text, count)``
    writes lines to stderr. Stray text at startup: ``--startup-noise TEXT`` on the server's
    command line.
``badutf8``
    ``badutf8(kind: str = "raw")`` writes a line with invalid UTF-8 to the wire: ``raw`` is
    plain junk, ``json`` is an otherwise valid ``notifications/message`` frame whose string
    holds invalid bytes.
``crash``
    ``crash(code: int = 3, delay: float = 0.0)`` sends a progress notification and a log
    message, then ``os._exit(code)`` with the call still pending.
``huge``
    ``huge(mib: float = 20.0)`` returns one text block of ``mib`` MiB.
``burst``
    ``burst(count: int = 5000, kind: str = "log")`` sends ``count`` notifications (``log``,
    ``progress`` or ``both``) and then returns.

Task presets (``tasks``, ``tasks-failed``, ``tasks-cancelled``, ``tasks-input``) and the
extension-refusing ``extension-strict``: see :mod:`mcp_proxy.testing.presets_tasks`.

Why the raw-stdout trick is needed: while serving, the SDK's stdio transport points fd 1 at
stderr and writes the wire through a private duplicate of the original stdout. Presets that
must corrupt the wire therefore duplicate fd 1 *when they are applied*, before the transport
claims it, and write to that duplicate (see :func:`wire_fd`). Lines are written with one
``os.write`` each, shorter than ``PIPE_BUF`` where possible, so they cannot tear a frame that
the transport writes concurrently.

The SDK marks logging, sampling and roots deprecated as of 2026-07-28 and warns
(``MCPDeprecationWarning``) on every call; :func:`_quietly` silences those calls so that a
``-W error`` run never turns a test server into a crashing one.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError, NoBackChannelError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from mcp_proxy.testing.presets_tasks import TASK_PRESETS

__all__ = [
    "PRESETS",
    "Preset",
    "apply_presets",
    "parse_preset_names",
    "wire_fd",
]

Preset = Callable[[MCPServer], None]
"""A preset adds its tools/resources/prompts to the server it is given."""

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]

README_TEXT = (
    "mcptape test server.\nThis static resource exists so that resources/read has a target.\n"
)

# ---------------------------------------------------------------------------------------------
# helpers


def _quietly[R](fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Call an SDK API that the SDK marks deprecated without letting its warning escape.

    ``typing_extensions.deprecated`` warns when the (async) function is *called*, not when the
    coroutine runs, so wrapping the call alone is enough and no filter outlives it.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return fn(*args, **kwargs)


def _is_modern(ctx: Context) -> bool:
    """True on a 2026-07-28 (sessionless, MRTR) connection."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _log(ctx: Context, level: LogLevel, data: Any) -> None:
    """Send a ``notifications/message`` for this request.

    Initialize era: always delivered. 2026-07-28: delivered only if the request opted in with a
    ``_meta`` log level at or below ``level`` (the SDK drops it otherwise) — that is the SDK's
    rule and mirrors the spec, so a test that wants logs sets ``Client(log_level=...)``.
    """
    await _quietly(ctx.log, level, data, logger_name="mcptape-test")


_wire_fd: int | None = None


def wire_fd() -> int:
    """A descriptor for the *real* stdout, captured before the stdio transport diverts fd 1.

    The first call duplicates fd 1; later calls return the same descriptor. Presets that write
    raw bytes to the wire call this when they are applied, i.e. before ``run()``. When the
    server runs over HTTP the descriptor is simply the process's stdout.
    """
    global _wire_fd
    if _wire_fd is None:
        _wire_fd = os.dup(1)  # non-inheritable by default (PEP 446)
    return _wire_fd


def _write_wire(data: bytes) -> None:
    """Write ``data`` to the real stdout in as few syscalls as the kernel allows."""
    fd = wire_fd()
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# ---------------------------------------------------------------------------------------------
# well-behaved presets


class Sum(BaseModel):
    """Structured result of ``add``; exists so a structured-output tool is in the mix."""

    result: float


def preset_basic(server: MCPServer) -> None:
    """Tools, resources (static + template) and a prompt: the everyday surface of a server."""

    @server.tool(description="Return the text unchanged.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two numbers (structured output).")
    def add(a: float, b: float) -> Sum:
        return Sum(result=a + b)

    @server.tool(description="Look something up in a region; region is mirrored into a header.")
    def lookup(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
        query: str,
    ) -> str:
        return f"{query}@{region}"

    @server.resource("test://readme", name="readme", mime_type="text/plain")
    def readme() -> str:
        return README_TEXT

    @server.resource("test://items/{item_id}", name="item", mime_type="application/json")
    def item(item_id: str) -> str:
        return json.dumps({"id": item_id, "name": f"item {item_id}"})

    @server.prompt(description="Greet someone by name.")
    def greet(name: str) -> str:
        return f"Please greet {name} warmly."


def preset_slow(server: MCPServer) -> None:
    """Long-running calls with progress and logs, and a call that never finishes on its own."""

    @server.tool(description="Take `steps` steps of `delay` seconds, reporting progress.")
    async def slow(ctx: Context, steps: int = 3, delay: float = 0.05) -> str:
        steps = max(0, min(steps, 10_000))
        for step in range(1, steps + 1):
            await anyio.sleep(max(0.0, delay))
            await ctx.report_progress(step, steps, f"step {step}/{steps}")
            await _log(ctx, "info", f"slow: step {step}/{steps}")
        return f"done after {steps} steps"

    @server.tool(description="Sleep for `seconds` (cancel it to test cancellation).")
    async def hang(seconds: float = 3600.0) -> str:
        await anyio.sleep(max(0.0, seconds))
        return f"woke up after {seconds} s"

    @server.tool(description="Send one log message at `level`.")
    async def log(
        ctx: Context, message: str = "hello from the server", level: LogLevel = "info"
    ) -> str:
        await _log(ctx, level, message)
        return f"logged at {level}"


def preset_failing(server: MCPServer) -> None:
    """A tool-level failure (isError) and a protocol-level one (JSON-RPC error)."""

    @server.tool(description="Fail as a tool: the result carries isError: true.")
    def fail(message: str = "deliberate failure") -> str:
        raise ToolError(message)

    @server.tool(description="Answer with a JSON-RPC error instead of a result.")
    def protocol_error(code: int = -32000, message: str = "deliberate protocol error") -> str:
        raise MCPError(code=code, message=message)


@contextmanager
def _back_channel(what: str) -> Iterator[None]:
    """Turn "this connection cannot carry a server→client request" into a tool error.

    2026-07-28 has no standalone server→client requests at all, and stateless or JSON-response
    Streamable HTTP has nowhere to send them; a tool error says so without a protocol error.
    """
    try:
        yield
    except NoBackChannelError as exc:
        raise ToolError(
            f"{what} needs a server→client request, which this connection cannot carry "
            "(no back-channel on 2026-07-28, stateless HTTP or JSON-response mode; "
            "the mrtr preset covers 2026-07-28)"
        ) from exc


def preset_sampling(server: MCPServer) -> None:
    """Standalone server→client requests (initialize era): sampling and roots."""

    @server.tool(description="Ask the client's LLM (sampling/createMessage).")
    async def sample(ctx: Context, prompt: str = "Say hello", max_tokens: int = 64) -> str:
        message = types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text=prompt)
        )
        with _back_channel("sampling"):
            result = await _quietly(
                ctx.session.create_message,
                [message],
                max_tokens=max_tokens,
                related_request_id=ctx.request_id,
            )
        return _sampled_text(result)

    @server.tool(description="Ask the client for its roots (roots/list).")
    async def roots(ctx: Context) -> list[str]:
        with _back_channel("roots/list"):
            result = await _quietly(ctx.session.list_roots)
        return [str(root.uri) for root in result.roots]


class Answer(BaseModel):
    """The form an elicitation asks the user to fill in."""

    answer: str


def preset_elicitation(server: MCPServer) -> None:
    """A standalone ``elicitation/create`` request (initialize era)."""

    @server.tool(description="Ask the user a question (elicitation/create, form mode).")
    async def ask(ctx: Context, question: str = "What is your name?") -> str:
        with _back_channel("elicitation"):
            result = await ctx.elicit(question, Answer)
        if result.action == "accept":
            return f"accept: {result.data.answer}"
        return result.action


# ---------------------------------------------------------------------------------------------
# MRTR (2026-07-28)

_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def _elicit_request(message: str) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=_ANSWER_SCHEMA)
    )


def _sample_request(prompt: str) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(
                    role="user", content=types.TextContent(type="text", text=prompt)
                )
            ],
            max_tokens=64,
        )
    )


def _sampled_text(result: types.CreateMessageResult | types.CreateMessageResultWithTools) -> str:
    content = result.content
    blocks = content if isinstance(content, list) else [content]
    return " ".join(b.text for b in blocks if isinstance(b, types.TextContent))


def _describe(response: Any) -> str:
    """One line per input response, whatever its kind, for the final tool result."""
    if isinstance(response, types.ElicitResult):
        if response.action == "accept" and response.content:
            return f"accept: {response.content.get('answer')}"
        return response.action
    if isinstance(response, types.CreateMessageResult | types.CreateMessageResultWithTools):
        return f"sampled: {_sampled_text(response)}"
    if isinstance(response, types.ListRootsResult):
        return "roots: " + ",".join(str(r.uri) for r in response.roots)
    return f"unexpected: {type(response).__name__}"


def _state(ctx: Context) -> dict[str, Any]:
    """Decode our own request state; the SDK has already unsealed it (RequestStateBoundary)."""
    if not ctx.request_state:
        return {}
    try:
        value = json.loads(ctx.request_state)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def preset_mrtr(server: MCPServer) -> None:
    """Hand-rolled ``input_required`` flows, so tests know exactly which frames to expect."""

    @server.tool(description="Ask for confirmation via MRTR, complete on the retry.")
    async def confirm(ctx: Context, action: str = "deploy") -> str | types.InputRequiredResult:
        question = f"Really {action}?"
        if not _is_modern(ctx):
            with _back_channel("confirm (initialize era)"):
                result = await ctx.session.elicit_form(question, _ANSWER_SCHEMA, ctx.request_id)
            return f"{action}: {_describe(result)}"
        responses = ctx.input_responses or {}
        if "confirm" not in responses:
            return types.InputRequiredResult(
                input_requests={"confirm": _elicit_request(question)},
                request_state=json.dumps({"action": action, "round": 1}),
            )
        state = _state(ctx)
        return f"{state.get('action', action)}: {_describe(responses['confirm'])}"

    @server.tool(description="Ask for elicitation, sampling and roots in one MRTR round.")
    async def interview(ctx: Context, topic: str = "testing") -> str | types.InputRequiredResult:
        opinion = _elicit_request(f"Thoughts on {topic}?")
        summary = _sample_request(f"Summarise {topic}")
        if not _is_modern(ctx):
            with _back_channel("interview (initialize era)"):
                elicited = await ctx.session.elicit_form(
                    opinion.params.message, _ANSWER_SCHEMA, ctx.request_id
                )
                sampled = await _quietly(
                    ctx.session.create_message,
                    summary.params.messages,
                    max_tokens=summary.params.max_tokens,
                    related_request_id=ctx.request_id,
                )
                listed = await _quietly(ctx.session.list_roots)
            parts = [_describe(elicited), _describe(sampled), _describe(listed)]
            return " | ".join(parts)
        responses = ctx.input_responses or {}
        keys = ("opinion", "summary", "roots")
        if not all(k in responses for k in keys):
            return types.InputRequiredResult(
                input_requests={
                    "opinion": opinion,
                    "summary": summary,
                    "roots": types.ListRootsRequest(),
                },
                request_state=json.dumps({"topic": topic}),
            )
        return " | ".join(_describe(responses[k]) for k in keys)

    @server.tool(description="Return input_required with only requestState `rounds` times.")
    async def countdown(ctx: Context, rounds: int = 3) -> str | types.InputRequiredResult:
        if not _is_modern(ctx):
            return f"liftoff after 0 of {rounds} rounds (initialize era: no MRTR)"
        state = _state(ctx)
        remaining = int(state.get("remaining", rounds))
        if remaining > 0:
            return types.InputRequiredResult(request_state=json.dumps({"remaining": remaining - 1}))
        return f"liftoff after {rounds} rounds"


# ---------------------------------------------------------------------------------------------
# misbehaving presets


def preset_noise(server: MCPServer) -> None:
    """Stray text on the stdio wire and on stderr."""
    wire_fd()  # capture the real stdout now, before the stdio transport diverts fd 1

    @server.tool(description="Write non-JSON lines to the real stdout, then answer.")
    def noise(text: str = "this line is not JSON", count: int = 1) -> str:
        line = text.replace("\n", " ").encode() + b"\n"
        for _ in range(max(0, count)):
            _write_wire(line)
        return f"wrote {max(0, count)} noise line(s)"

    @server.tool(description="Write lines to stderr, then answer.")
    def stderr_noise(text: str = "stderr chatter", count: int = 1) -> str:
        line = text.replace("\n", " ").encode() + b"\n"
        for _ in range(max(0, count)):
            os.write(2, line)
        return f"wrote {max(0, count)} stderr line(s)"


BAD_UTF8_RAW = b"\xff\xfe not utf-8 \xc3\x28 \xed\xa0\x80\n"
BAD_UTF8_JSON = (
    b'{"jsonrpc":"2.0","method":"notifications/message",'
    b'"params":{"level":"info","data":"bad \xff\xfe bytes \xc3\x28"}}\n'
)


def preset_badutf8(server: MCPServer) -> None:
    """Invalid UTF-8 on the stdio wire."""
    wire_fd()

    @server.tool(description="Write a line with invalid UTF-8 to the real stdout (kind: raw|json).")
    def badutf8(kind: Literal["raw", "json"] = "raw") -> str:
        _write_wire(BAD_UTF8_JSON if kind == "json" else BAD_UTF8_RAW)
        return f"wrote a {kind} line with invalid UTF-8"


def preset_crash(server: MCPServer) -> None:
    """The server process dies in the middle of a call."""

    @server.tool(description="Send progress and a log, then exit the process with `code`.")
    async def crash(ctx: Context, code: int = 3, delay: float = 0.0) -> str:
        await ctx.report_progress(0, 1, "about to crash")
        await _log(ctx, "warning", f"crashing with exit code {code}")
        await anyio.sleep(max(0.0, delay) + 0.05)  # let the notifications reach the wire
        sys.stderr.flush()
        os._exit(code)


HUGE_PATTERN = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_\n"  # 64 bytes


def preset_huge(server: MCPServer) -> None:
    """Oversize responses."""

    # Unstructured: a structured copy of the text would double the bytes on the wire.
    @server.tool(description="Return one text block of `mib` MiB.", structured_output=False)
    def huge(mib: float = 20.0) -> str:
        size = int(max(0.0, mib) * 1024 * 1024)
        reps, rest = divmod(size, len(HUGE_PATTERN))
        return HUGE_PATTERN * reps + HUGE_PATTERN[:rest]


def preset_burst(server: MCPServer) -> None:
    """Floods of notifications belonging to one request."""

    @server.tool(description="Send `count` notifications (kind: log|progress|both), then answer.")
    async def burst(
        ctx: Context, count: int = 5000, kind: Literal["log", "progress", "both"] = "log"
    ) -> str:
        count = max(0, min(count, 1_000_000))
        for k in range(1, count + 1):
            if kind in ("log", "both"):
                await _log(ctx, "info", k)
            if kind in ("progress", "both"):
                await ctx.report_progress(k, count)
        return f"sent {count} {kind} notification(s)"


PRESETS: dict[str, Preset] = {
    "basic": preset_basic,
    "slow": preset_slow,
    "failing": preset_failing,
    "sampling": preset_sampling,
    "elicitation": preset_elicitation,
    "mrtr": preset_mrtr,
    "noise": preset_noise,
    "badutf8": preset_badutf8,
    "crash": preset_crash,
    "huge": preset_huge,
    "burst": preset_burst,
    **TASK_PRESETS,
}
"""Every preset by name, in the order the docs list them (task presets: :mod:`.presets_tasks`)."""

ALL_WELL_BEHAVED = ("basic", "slow", "failing", "sampling", "elicitation", "mrtr")
"""Presets that never corrupt the wire or kill the process, safe to combine in one server."""


def parse_preset_names(spec: str | Iterable[str]) -> list[str]:
    """Turn ``"basic,slow"`` (or a list of such strings) into known, de-duplicated names.

    ``all`` expands to every well-behaved preset. Unknown names raise ``ValueError`` naming the
    valid ones, so a typo in a test fails loudly instead of starting an empty server.
    """
    parts = [spec] if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in parts:
        for raw in part.split(","):
            name = raw.strip()
            if not name:
                continue
            expanded = ALL_WELL_BEHAVED if name == "all" else (name,)
            for item in expanded:
                if item not in PRESETS:
                    raise ValueError(f"unknown preset {item!r}; known: {', '.join(PRESETS)}, all")
                if item not in names:
                    names.append(item)
    return names


def apply_presets(server: MCPServer, presets: str | Iterable[str]) -> MCPServer:
    """Add every named preset to ``server`` and return it (for chaining)."""
    for name in parse_preset_names(presets):
        PRESETS[name](server)
    return server
