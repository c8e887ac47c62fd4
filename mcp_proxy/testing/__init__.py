"""Composable MCP test servers and client helpers for tests, benchmarks and the demo.

- :mod:`.presets` — the behaviours (``basic``, ``slow``, ``failing``, ``sampling``,
  ``elicitation``, ``mrtr``, and the misbehaving ``noise``, ``badutf8``, ``crash``, ``huge``,
  ``burst``), composable by name.
- :mod:`.presets_tasks` / :mod:`.tasks` — task presets in both eras (``tasks``, ``tasks-failed``,
  ``tasks-cancelled``, ``tasks-input``) and ``extension-strict``, served on SDK middleware.
- :mod:`.task_client` — the client-side task driver (:func:`~.task_client.run_task`).
- :mod:`.server` — ``python -m mcp_proxy.testing.server --preset a,b --transport stdio|http|sse``.
- :mod:`.process` — start HTTP servers as subprocesses and wait for their ready line (stdlib).
- :mod:`.client` — SDK client helpers and the scripted session proxy tests compare.
- :mod:`.rawecho` — a stdlib-only JSON-RPC line echo server for benchmarks.

Deliberately empty of imports: ``rawecho`` and ``process`` must not pay for ``import mcp``.
"""
