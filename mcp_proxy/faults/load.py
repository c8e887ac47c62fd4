"""Build a :class:`FaultEngine` from what a user typed: ``--fault RULE`` and ``--faults FILE``.

One function for every command that injects faults (``record`` over stdio and HTTP, ``mock``),
so the same rule is refused with the same line everywhere: a rule the transport cannot carry
out (``http`` on stdio, ``close-stdin`` over HTTP) is a user error at start, not a silent no-op.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mcp_proxy.faults.engine import FaultEngine, RulesFile
from mcp_proxy.faults.rules import FaultRuleError, parse_intercept_rule, parse_rule, unsupported

__all__ = ["load_engine", "load_intercepts"]


def _stderr(message: str) -> None:
    print(f"mcptape: {message}", file=sys.stderr, flush=True)


def load_engine(
    rules: Sequence[str] = (),
    path: Path | str | None = None,
    *,
    transport: str,
    seed: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> FaultEngine | None:
    """The engine for these rules (``--fault`` lines first, then the file's), or None for none.

    A rules file is watched: it is re-read when it changes (an edit that does not parse keeps
    the previous rules and prints one warning through ``warn``, stderr by default). A file is
    an engine even when it is empty — the user may fill it in while a host is connected.
    Raises :class:`FaultRuleError` (one line, its position, exit code 2) for a bad rule.
    """
    parsed = [parse_rule(text) for text in rules]
    source = RulesFile(Path(path), warn=warn or _stderr) if path is not None else None
    if not parsed and source is None:
        return None
    for rule in [*parsed, *(source.rules if source else [])]:
        why = unsupported(rule, transport)
        if why is not None:
            raise FaultRuleError(why)
    return FaultEngine(parsed, seed=seed, source=source)


def load_intercepts(
    rules: Sequence[str] = (),
    path: Path | str | None = None,
    *,
    warn: Callable[[str], None] | None = None,
) -> FaultEngine | None:
    """The engine of ``--intercept RULE`` and ``--intercepts FILE`` (``[[intercept]]`` tables,
    re-read when the file changes), or None for none; its decisions' action is ``intercept``.
    Raises :class:`FaultRuleError` (one line, exit 2) for a bad rule."""
    parsed = [parse_intercept_rule(text) for text in rules]
    source = (
        RulesFile(Path(path), warn=warn or _stderr, table="intercept") if path is not None else None
    )
    if not parsed and source is None:
        return None
    return FaultEngine(parsed, source=source)
