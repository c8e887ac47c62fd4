"""Client-side helpers for tests: connect an SDK ``Client`` to a test server and drive it.

The same scripted conversation runs directly against a server and through the proxy, and the
two outputs are compared; that is why :func:`run_scripted_session` returns plain, JSON-able
data in a fixed order and drives every call sequentially (the wire order is deterministic).

SDK 2.3 points worth knowing (they shape these helpers):

- ``Client(mode="legacy")`` forces the initialize handshake; ``mode="auto"`` (default)
  probes ``server/discover`` and settles on 2026-07-28 with SDK servers.
- Server→client requests (sampling, elicitation, roots) are answered by callbacks given to
  the ``Client``; on 2026-07-28 the same callbacks answer MRTR ``inputRequests``.
- Logs on 2026-07-28 arrive only if the request opts in: ``Client(log_level=...)`` stamps
  ``io.modelcontextprotocol/logLevel`` on every request. A ``logging_callback`` alone is no
  opt-in. In the initialize era logs arrive regardless.
- Progress needs ``call_tool(..., progress_callback=...)``, which sends a progress token.
- The ``server/discover`` probe of ``mode="auto"`` waits at most
  ``mcp.client.session.DISCOVER_TIMEOUT_SECONDS`` (10 s), counted from the moment the stdio
  client spawned the server: see :func:`allow_slow_server_start`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client import session as _sdk_session
from mcp.client.session import ClientRequestContext
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer

from mcp_proxy.testing.process import server_argv

__all__ = [
    "SCRIPTED_PRESETS",
    "STARTUP_ALLOWANCE_SECONDS",
    "CallbackRecorder",
    "ProgressRecorder",
    "allow_slow_server_start",
    "make_client",
    "run_scripted_session",
    "stdio_params",
    "tool_text",
]

SCRIPTED_PRESETS = ("basic", "slow", "failing")
"""The presets :func:`run_scripted_session` needs on the server."""

Mode = Literal["legacy", "auto"] | str


def stdio_params(
    presets: str | Iterable[str],
    *,
    name: str | None = None,
    startup_noise: str | None = None,
    log_level: str | None = None,
    state_key: str | None = None,
    env: Mapping[str, str] | None = None,
    encoding_error_handler: Literal["strict", "ignore", "replace"] = "strict",
    python: str | None = None,
) -> StdioServerParameters:
    """``StdioServerParameters`` that launch the test server with these presets.

    The SDK client passes only a handful of environment variables to the child; the server is
    found through the venv's interpreter (``sys.executable``), so no ``PYTHONPATH`` is needed.
    Use ``encoding_error_handler="replace"`` with the ``badutf8`` preset: with the default
    ``strict`` the SDK client's reader fails on the invalid bytes.
    """
    argv = server_argv(
        presets,
        "stdio",
        name=name,
        startup_noise=startup_noise,
        log_level=log_level,
        state_key=state_key,
        python=python,
    )
    return StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env=dict(env) if env else None,
        encoding_error_handler=encoding_error_handler,
    )


@dataclass
class CallbackRecorder:
    """Answers server→client requests with canned replies and records everything it saw.

    Pass ``**recorder.client_kwargs()`` to ``Client``; the same callbacks serve standalone
    requests (initialize era) and MRTR ``inputRequests`` (2026-07-28).
    """

    sample_reply: str = "sampled reply"
    elicit_answer: str | None = "Ada"
    """``None`` makes every elicitation a ``decline``."""
    root_uris: tuple[str, ...] = ("file:///tmp/mcptape-root",)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    sampling_requests: list[types.CreateMessageRequestParams] = field(default_factory=list)
    elicitation_requests: list[types.ElicitRequestParams] = field(default_factory=list)
    roots_requests: int = 0

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampling_requests.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.sample_reply),
            model="mcptape-fake-model",
            stop_reason="endTurn",
        )

    async def on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.elicitation_requests.append(params)
        if self.elicit_answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"answer": self.elicit_answer})

    async def on_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.roots_requests += 1
        return types.ListRootsResult(
            roots=[types.Root(uri=uri, name=uri.rsplit("/", 1)[-1]) for uri in self.root_uris]  # type: ignore[arg-type]
        )

    def client_kwargs(self, log_level: types.LoggingLevel | None = "debug") -> dict[str, Any]:
        """Keyword arguments for ``Client``: all callbacks plus the 2026-07-28 log opt-in."""
        return {
            "sampling_callback": self.on_sampling,
            "elicitation_callback": self.on_elicitation,
            "list_roots_callback": self.on_list_roots,
            "logging_callback": self.on_log,
            "log_level": log_level,
        }

    def log_data(self) -> list[Any]:
        return [entry.data for entry in self.logs]


@dataclass
class ProgressRecorder:
    """A ``progress_callback`` that keeps every update as ``(progress, total, message)``."""

    updates: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.updates.append((progress, total, message))


STARTUP_ALLOWANCE_SECONDS = 60.0
"""How long a ``mode="auto"`` client made here waits for its ``server/discover`` answer."""


def allow_slow_server_start() -> None:
    """Let the ``server/discover`` probe wait :data:`STARTUP_ALLOWANCE_SECONDS`, not the SDK's 10 s.

    A stdio client sends the probe as soon as it has spawned the server, so the probe's timeout
    also covers the server's start-up: through ``mcptape record`` that is the relay, its
    recorder process and the SDK test server (importing ``mcp`` builds its pydantic models:
    ~1.6 s of CPU). On the suite's shared 2-core machine under load that took longer than 10 s
    of wall time; the SDK then gave up on the probe and fell back to ``initialize``, which the
    server — by then serving the probe's 2026-07-28 era — refused with -32022 before the SDK
    probed again. The session worked, but its recording held a refused ``initialize`` and the
    clean-session tests failed on findings that load alone had caused. The allowance only
    lengthens a wait for an answer that comes; a server that never answers still fails the
    test (by the test's own timeout). The SDK reads the module constant at each probe, so
    setting it once per process is enough; a larger value already set is kept.
    """
    if _sdk_session.DISCOVER_TIMEOUT_SECONDS < STARTUP_ALLOWANCE_SECONDS:
        _sdk_session.DISCOVER_TIMEOUT_SECONDS = STARTUP_ALLOWANCE_SECONDS


def make_client(
    target: StdioServerParameters | str | MCPServer,
    *,
    mode: Mode = "auto",
    recorder: CallbackRecorder | None = None,
    log_level: types.LoggingLevel | None = "debug",
    **kwargs: Any,
) -> Client:
    """A ``Client`` for a stdio server, a Streamable HTTP URL, a legacy ``.../sse`` URL, or an
    in-process ``MCPServer`` (no transport at all: fast, for logic-only tests).

    With a recorder, all its callbacks are wired in (and the log opt-in is set).
    ``cache=None`` by default so that repeated list calls reach the wire, which is what a
    flight-recorder test wants to see. The era probe waits for a slow server start
    (:func:`allow_slow_server_start`).
    """
    allow_slow_server_start()
    server: Any = target
    if isinstance(target, str) and target.rstrip("/").endswith("/sse"):
        server = sse_client(target)
    options: dict[str, Any] = {"mode": mode, "cache": None}
    if recorder is not None:
        options.update(recorder.client_kwargs(log_level))
    elif log_level is not None:
        options["log_level"] = log_level
    options.update(kwargs)
    return Client(server, **options)


def tool_text(result: types.CallToolResult) -> str:
    """The concatenated text blocks of a tool result."""
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _resource_text(result: types.ReadResourceResult) -> str:
    return "".join(c.text for c in result.contents if isinstance(c, types.TextResourceContents))


def _prompt_text(result: types.GetPromptResult) -> list[str]:
    return [
        m.content.text if isinstance(m.content, types.TextContent) else type(m.content).__name__
        for m in result.messages
    ]


async def run_scripted_session(
    client: Client, recorder: CallbackRecorder | None = None
) -> dict[str, Any]:
    """Drive ``client`` through the ``basic``, ``slow`` and ``failing`` presets.

    Covers listing and calling tools (plain and structured), static and templated resources,
    prompts, progress, a log message and a tool that fails with ``isError``. Returns JSON-able
    data that is identical whether or not a proxy sits in between, for the same era.
    """
    out: dict[str, Any] = {
        "protocol_version": client.protocol_version,
        "server_name": client.server_info.name if client.server_info else None,
    }
    tools = await client.list_tools()
    out["tools"] = sorted(t.name for t in tools.tools)

    echo = await client.call_tool("echo", {"text": "hello, wire"})
    out["echo"] = tool_text(echo)
    add = await client.call_tool("add", {"a": 2, "b": 3})
    out["add"] = add.structured_content

    resources = await client.list_resources()
    out["resources"] = sorted(str(r.uri) for r in resources.resources)
    templates = await client.list_resource_templates()
    out["resource_templates"] = sorted(t.uri_template for t in templates.resource_templates)
    out["readme"] = _resource_text(await client.read_resource("test://readme"))
    out["item"] = json.loads(_resource_text(await client.read_resource("test://items/42")))

    prompts = await client.list_prompts()
    out["prompts"] = sorted(p.name for p in prompts.prompts)
    out["greet"] = _prompt_text(await client.get_prompt("greet", {"name": "Ada"}))

    progress = ProgressRecorder()
    slow = await client.call_tool("slow", {"steps": 3, "delay": 0.01}, progress_callback=progress)
    out["slow"] = tool_text(slow)
    out["progress"] = [list(update) for update in progress.updates]

    fail = await client.call_tool("fail", {"message": "scripted failure"})
    out["fail"] = {"is_error": fail.is_error, "text": tool_text(fail)}

    log = await client.call_tool("log", {"message": "scripted log", "level": "warning"})
    out["log"] = tool_text(log)
    if recorder is not None:
        out["logs"] = recorder.log_data()
    return out
