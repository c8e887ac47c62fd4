"""Analysis: turn a recorded session into exchanges and findings.

Sans-I/O on purpose: :func:`analyze` takes frame rows and HTTP-exchange rows exactly as
:class:`mcp_proxy.store.queries.Store` returns them and returns plain objects, so the CLI, the
dashboard, diff and replay all get the same answer and tests need no sockets. Loading, caching
and storing live in :mod:`mcp_proxy.analysis.service`.

Entry points for other parts of mcptape:

- :func:`analyze` — frames (+ session row, HTTP exchanges) → :class:`Analysis`
  (``exchanges``, ``chains``, ``findings``, ``facts``);
- :mod:`mcp_proxy.analysis.service` — ``stored_findings(url, session)`` (stored, versioned,
  recomputed only when stale, and with them the per-method numbers, by the one bounded pass
  ``_session_pass`` over ``stream_analysis``: two streaming passes, no exchanges kept; with
  ``also`` the same pass hands each exchange to one more consumer, e.g.
  :class:`~mcp_proxy.analysis.in_order.InOrder` for ``show -x``), ``settle`` (that pass when a
  session ends) and ``session_analysis(store, session)`` (the dashboard's whole-session views of
  small sessions, stored nowhere);
- :mod:`mcp_proxy.analysis.stats` — per-method counts, error rates and latency percentiles;
- :mod:`mcp_proxy.analysis.catalogue` — every finding code with severity, explanation and
  spec reference; :func:`mcp_proxy.analysis.taxonomy.classify_error` names one error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_proxy.analysis.version import ANALYZER_VERSION

if TYPE_CHECKING:
    from mcp_proxy.analysis.catalogue import CATALOGUE, Severity
    from mcp_proxy.analysis.core import Analysis, analyze
    from mcp_proxy.analysis.model import Chain, Exchange, Finding, SessionFacts
    from mcp_proxy.analysis.taxonomy import classify_error

__all__ = [
    "ANALYZER_VERSION",
    "CATALOGUE",
    "Analysis",
    "Chain",
    "Exchange",
    "Finding",
    "SessionFacts",
    "Severity",
    "analyze",
    "classify_error",
]

_LAZY = {
    "CATALOGUE": "mcp_proxy.analysis.catalogue",
    "Severity": "mcp_proxy.analysis.catalogue",
    "Analysis": "mcp_proxy.analysis.core",
    "analyze": "mcp_proxy.analysis.core",
    "Chain": "mcp_proxy.analysis.model",
    "Exchange": "mcp_proxy.analysis.model",
    "Finding": "mcp_proxy.analysis.model",
    "SessionFacts": "mcp_proxy.analysis.model",
    "classify_error": "mcp_proxy.analysis.taxonomy",
}


def __getattr__(name: str) -> Any:
    """Import on first use: ``python -m mcp_proxy.analysis.catalogue`` and the CLI stay light."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mcp_proxy.analysis' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
