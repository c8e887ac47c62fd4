"""Intercept: hold a message on the wire until a person decides (docs/intercept.md).

- :mod:`~mcp_proxy.intercept.verdicts` — what a person may send instead (an edited message, an
  answer, ``--set PATH=VALUE``), checked to be one JSON-RPC message (pure);
- :mod:`~mcp_proxy.intercept.desk` — the relay's side: hold a message in the store, wait for
  the decision (bounded polls), time out, say so on the terminal.

The matching is the fault rule language's (``faults/rules.py``: an intercept rule is its
matchers without an action); the relays carry a decision out at their fault seams.
"""
