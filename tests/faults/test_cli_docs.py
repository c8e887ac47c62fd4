"""Every rule docs/faults.md shows parses (and the mistakes it shows fail as it says)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_proxy.faults import FaultRuleError, parse_rule, unsupported
from mcp_proxy.faults.rules import parse_rules_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "faults.md"
TEXT = DOC.read_text(encoding="utf-8")
RULES = re.findall(r"--fault '([^']*)'", TEXT)
BAD = "delay ms=fast"


@pytest.mark.parametrize("text", [r for r in RULES if r != BAD])
def test_every_documented_rule_parses(text: str) -> None:
    rule = parse_rule(text)
    http = "--upstream" in TEXT[: TEXT.index(text)].rsplit("\n", 1)[-1]
    assert unsupported(rule, "http" if http else "stdio") is None, text


def test_the_documented_mistake_fails_as_documented() -> None:
    with pytest.raises(FaultRuleError) as caught:
        parse_rule(BAD)
    assert f"mcptape: {caught.value}" in TEXT


def test_the_documented_rules_file_parses() -> None:
    [block] = re.findall(r"```toml\n(.*?)```", TEXT, re.S)
    rules = parse_rules_text(block)
    assert [r.action for r in rules] == ["delay", "error"]
    assert rules[0].match.seed == 7 and rules[1].match.p == 0.3
