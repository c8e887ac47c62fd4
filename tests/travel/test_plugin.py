"""The pytest plugin, exercised with pytest's own ``pytester`` (registered by entry point)."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from tests.helpers.forkserver import server_python
from tests.travel.conftest import RECORDINGS

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(120)


def test_registered_by_entry_point() -> None:
    found = [e for e in entry_points(group="pytest11") if e.name == "mcptape"]
    assert [e.value for e in found] == ["mcp_proxy.pytest_plugin"]


def _server(presets: str, module: str = "mcp_proxy.testing.server") -> list[str]:
    return [server_python(), "-m", module, "--preset", presets, "--transport", "stdio"]


def test_mock_fixture_serves_an_sdk_client(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        import asyncio
        import pytest
        from mcp_proxy.testing.client import make_client, tool_text

        REC = {str(RECORDINGS / "basic-legacy.mcptape.jsonl")!r}

        async def echo(target):
            async with make_client(target, mode="legacy") as client:
                return tool_text(await client.call_tool("echo", {{"text": "hello, wire"}}))

        @pytest.mark.mcptape_recording(REC)
        def test_stdio(mcptape_mock):
            assert mcptape_mock.command and mcptape_mock.record_mode == "none"
            assert asyncio.run(echo(mcptape_mock.stdio_params())) == "hello, wire"

        @pytest.mark.mcptape_recording(REC, http=True)
        def test_http(mcptape_mock):
            assert mcptape_mock.url.startswith("http://127.0.0.1:")
            assert asyncio.run(echo(mcptape_mock.url)) == "hello, wire"
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_replay_marker_passes_on_the_same_server_and_fails_on_a_changed_one(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        REC = {str(RECORDINGS / "basic-legacy.mcptape.jsonl")!r}

        @pytest.mark.mcptape_replay(REC, command={_server("basic,slow,failing")!r})
        def test_same():
            pass

        @pytest.fixture
        def mcptape_server():
            return {_server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed")!r}

        @pytest.mark.mcptape_replay(REC)
        def test_changed(mcptape_server):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the server answered differently from basic-legacy.mcptape.jsonl*",
            '*$.result.content[[]0[]].text: "hello, wire" → "HELLO, WIRE"*',
        ]
    )


def test_record_mode_option_and_missing_recording(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mcptape_recording("nowhere.jsonl")
        def test_missing(mcptape_mock):
            pass

        def test_mode(request):
            from mcp_proxy.pytest_plugin import record_mode
            assert record_mode(request.config) == "all"
        """
    )
    missing = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-k", "test_missing")
    missing.assert_outcomes(errors=1)
    missing.stdout.fnmatch_lines(["*recording*nowhere.jsonl does not exist*"])
    mode = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "-k", "test_mode", "--mcptape-record-mode=all"
    )
    mode.assert_outcomes(passed=1)
    bad = pytester.runpytest_subprocess("-q", "--mcptape-record-mode=sometimes")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
