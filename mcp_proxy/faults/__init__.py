"""Fault injection: make the wire go wrong on purpose, the same way a failing peer would.

- :mod:`~mcp_proxy.faults.rules` — the rule language (one line per fault; TOML files);
- :mod:`~mcp_proxy.faults.engine` — which rule fires on which message (pure, thread-safe,
  seeded, re-reads a rules file when it changes);
- :mod:`~mcp_proxy.faults.actions` — the bytes a fault sends in a peer's place.

The transports (the stdio relay, the HTTP relay, the mock) carry decisions out; see
docs/faults.md for the language and recipes.
"""

from mcp_proxy.faults.engine import (
    Decision,
    FaultEngine,
    FirstOf,
    MessageFacts,
    RulesFile,
    message_facts,
)
from mcp_proxy.faults.rules import (
    FaultRuleError,
    Match,
    Rule,
    parse_intercept_rule,
    parse_rule,
    parse_rules_file,
    unsupported,
)

__all__ = [
    "Decision",
    "FaultEngine",
    "FaultRuleError",
    "FirstOf",
    "Match",
    "MessageFacts",
    "Rule",
    "RulesFile",
    "message_facts",
    "parse_intercept_rule",
    "parse_rule",
    "parse_rules_file",
    "unsupported",
]
