"""The OAuth checks over exchange rows shaped as the recorder stores them (sans I/O).

The end-to-end tests (``test_oauth.py``) drive a clean dance and a resource mismatch through
the real proxy; these cover the failure shapes a real authorization server is hard to make
produce on demand: a challenge-less 401, a refused token request, a client looping on a token.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.analysis.model import FindingSink
from mcp_proxy.analysis.oauth import LOOP_THRESHOLD, oauth_checks

MCP = "https://mcp.example.com:443/mcp"


def row(hid: int, method: str, url: str, status: int, **kw: Any) -> dict[str, Any]:
    return {
        "id": hid,
        "method": method,
        "url": url,
        "status": status,
        "started_at": float(hid),
        "request_headers": kw.get("req", [["Host", "mcp.example.com"]]),
        "response_headers": kw.get("resp", [["Content-Type", "application/json"]]),
        "meta": json.dumps(kw.get("meta", {})),  # stored as JSON text by some readers
    }


def codes(rows: list[dict[str, Any]]) -> list[str]:
    sink = FindingSink()
    oauth_checks({r["id"]: r for r in rows}, sink, {r["id"]: [r["id"]] for r in rows})
    return [f.code for f in sink.result()]


def test_401_without_challenge() -> None:
    assert codes([row(1, "POST", MCP, 401)]) == ["oauth.missing_www_authenticate"]
    with_challenge = row(1, "POST", MCP, 401, resp=[["WWW-Authenticate", "Bearer realm=x"]])
    assert codes([with_challenge]) == []


def test_token_endpoint_error_names_the_error() -> None:
    body = {"text": '{"error":"invalid_grant","error_description":"code expired"}'}
    r = row(
        1,
        "POST",
        "https://as.example.com/token",
        400,
        meta={"oauth": {"role": "token_endpoint"}, "response_body": body},
    )
    sink = FindingSink()
    oauth_checks({1: r}, sink)
    (f,) = sink.result()
    assert f.code == "oauth.token_error" and "invalid_grant" in f.detail
    assert "code expired" in f.detail


def test_refused_token_loop_and_reset_by_success() -> None:
    bearer = [["Authorization", "Bearer [REDACTED]"]]
    challenge = [["WWW-Authenticate", 'Bearer error="invalid_token"']]
    loop = [row(i, "POST", MCP, 401, req=bearer, resp=challenge) for i in range(LOOP_THRESHOLD)]
    assert codes(loop) == ["oauth.unauthorized_loop"]
    broken = [*loop[:-1], row(50, "POST", MCP, 200), loop[-1]]
    broken[-1]["started_at"] = 99.0
    assert codes(broken) == []


def test_resource_mismatch_against_the_metadata_path() -> None:
    prm = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    good = row(
        1,
        "GET",
        prm,
        200,
        meta={
            "oauth": {
                "role": "protected_resource_metadata",
                "resource": "https://mcp.example.com/mcp",
            }
        },
    )
    bad = row(
        2,
        "GET",
        prm,
        200,
        meta={
            "oauth": {
                "role": "protected_resource_metadata",
                "resource": "https://internal:8080/mcp",
            }
        },
    )
    assert codes([good, row(3, "POST", MCP, 200)]) == []
    assert codes([bad, row(3, "POST", MCP, 200)]) == ["oauth.resource_mismatch"]
