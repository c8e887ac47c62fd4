"""The forward proxy: record MCP traffic a host sends to servers it cannot be re-pointed away from.

``mcptape record --forward`` records through one recording, the forward tape
(:mod:`mcp_proxy.forward.tape`), fed by one of two engines (:mod:`mcp_proxy.forward.runner`): the
lean one (:mod:`mcp_proxy.forward.lean`, mcptape's own CONNECT proxy on the HTTP relay's core, the
default, calling the tape directly) or mitmproxy in-process (``--engine mitmproxy``, through the
tape's mitmproxy adapter, :mod:`mcp_proxy.forward.addon`); ``mitmdump -s addons/mcptape.py``
loads that adapter into a mitmproxy the user already runs. The host is pointed at the proxy
(``HTTPS_PROXY``) and trusts mitmproxy's CA (both engines make their certificates from it); the
tape recognises MCP exchanges by what they are (JSON-RPC bodies, ``Mcp-*``
headers, SSE streams carrying JSON-RPC, the legacy ``endpoint`` event) and hands them to the same
recorder contract, session grouping and redaction as the reverse proxy
(:mod:`mcp_proxy.relay.http`), so every reader of the store works on them unchanged.

mitmproxy is imported only on this path (never by ``mcptape record -- CMD``):
:func:`require_mitmproxy` turns its absence into one line naming the install command.
"""

from __future__ import annotations

from mcp_proxy.errors import UserError

__all__ = ["INSTALL_HINT", "require_mitmproxy"]

INSTALL_HINT = "pip install 'mitmproxy>=12.3' (or: uv add mitmproxy)"


def require_mitmproxy() -> None:
    """Raise a one-line :class:`UserError` when mitmproxy cannot be imported."""
    try:
        import mitmproxy  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"the forward proxy needs mitmproxy, which is not installed: {INSTALL_HINT}"
        ) from exc
