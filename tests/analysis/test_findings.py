"""Every finding code: one session that triggers it, one near miss that must not."""

from __future__ import annotations

import pytest

from mcp_proxy.analysis.catalogue import CATALOGUE, FOREIGN_CODES, SUMMARY_CODE
from tests.analysis.cases import CASES

ANALYZER_CODES = sorted(set(CATALOGUE) - FOREIGN_CODES - {SUMMARY_CODE})


def test_every_analyzer_code_has_a_trigger_and_a_near_miss() -> None:
    assert sorted(CASES) == ANALYZER_CODES


@pytest.mark.parametrize("code", sorted(CASES))
def test_trigger(code: str) -> None:
    analysis = CASES[code][0]().analyze()
    found = {f.code for f in analysis.findings}
    assert code in found, sorted(found)
    for f in analysis.findings:
        if f.code == code:
            assert f.title and "\n" not in f.title
            # HTTP-level findings on exchanges that carry no JSON-RPC frame (a bare 401, the
            # OAuth dance's metadata and token requests, a request mcptape refused before
            # reading its body) point at no frame.
            frameless = ("http.unauthorized", "http.auth_challenge", "http.foreign_host")
            assert f.frame_seqs or code in frameless or code.startswith("oauth."), f


@pytest.mark.parametrize("code", sorted(CASES))
def test_near_miss(code: str) -> None:
    found = {f.code for f in CASES[code][1]().analyze().findings}
    assert code not in found, sorted(found)
