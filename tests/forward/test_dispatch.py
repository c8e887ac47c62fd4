"""The lean hook dispatch of ``record --forward`` (``mcp_proxy/forward/dispatch.py``).

Real mitmproxy masters, real addons and a real script file; each behaviour is checked on
mitmproxy's own :class:`AddonManager` and on :class:`LeanAddonManager` alike (the lean one must
not differ), plus the one thing that must differ: an addon's hooks are looked up once, not on
every event. A test through the real proxy checks that a user's ``scripts`` from config.yaml
still see every flow.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions, hooks, options
from mitmproxy.addonmanager import AddonManager
from mitmproxy.addons.script import ScriptLoader
from mitmproxy.master import Master
from mitmproxy.proxy.layers.http import HttpRequestHook, HttpResponseHook
from mitmproxy.test import tflow

from mcp_proxy.forward.dispatch import LeanAddonManager
from tests.forward.conftest import TLSFiles, TLSServer, run_forward

MANAGERS = [AddonManager, LeanAddonManager]


class Seen:
    """An addon that notes which of its hooks ran (and in which order, across addons)."""

    def __init__(self, name: str, log: list[str], *, fail: bool = False, halt: bool = False):
        self.name = name
        self.log = log
        self.fail = fail
        self.halt = halt

    def request(self, flow: Any) -> None:
        self.log.append(f"{self.name}.request")
        if self.fail:
            raise ValueError(f"{self.name} broke")
        if self.halt:
            raise exceptions.AddonHalt()

    async def response(self, flow: Any) -> None:
        await asyncio.sleep(0)
        self.log.append(f"{self.name}.response")


class Lookups:
    """An addon without a ``request`` hook that counts how often one is looked up."""

    name = "lookups"

    def __init__(self) -> None:
        self.count = 0

    def __getattr__(self, attr: str) -> Any:  # only for missing attributes
        if attr == "request":
            self.count += 1
        raise AttributeError(attr)


async def _master(manager: type[AddonManager]) -> Master:
    m = Master(options.Options())
    if manager is not AddonManager:
        m.options.changed.disconnect(m.addons._configure_all)
        m.addons = manager(m)
    return m


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_hooks_run_in_chain_order_sync_and_async(manager: type[AddonManager]) -> None:
    log: list[str] = []
    m = await _master(manager)
    m.addons.add(Seen("a", log), Lookups(), Seen("b", log))
    f = tflow.tflow(resp=True)
    await m.addons.handle_lifecycle(_req(f))
    await m.addons.trigger_event(_resp(f))
    assert log == ["a.request", "b.request", "a.response", "b.response"]


def _req(f: Any) -> hooks.Hook:
    return HttpRequestHook(f)


def _resp(f: Any) -> hooks.Hook:
    return HttpResponseHook(f)


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_an_addon_that_raises_is_logged_and_the_next_still_runs(
    manager: type[AddonManager], caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    m = await _master(manager)
    m.addons.add(Seen("a", log, fail=True), Seen("b", log))
    with caplog.at_level(logging.ERROR, logger="mitmproxy.addonmanager"):
        await m.addons.handle_lifecycle(_req(tflow.tflow()))
    assert log == ["a.request", "b.request"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == ["Addon error: a broke"]
    assert errors[0].exc_info is not None


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_addon_halt_stops_the_event(manager: type[AddonManager]) -> None:
    log: list[str] = []
    m = await _master(manager)
    m.addons.add(Seen("a", log, halt=True), Seen("b", log))
    await m.addons.trigger_event(_req(tflow.tflow()))
    assert log == ["a.request"]


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_addons_added_or_removed_later_are_seen(manager: type[AddonManager]) -> None:
    log: list[str] = []
    m = await _master(manager)
    a = Seen("a", log)
    m.addons.add(a)
    await m.addons.trigger_event(_req(tflow.tflow()))
    m.addons.add(Seen("b", log))
    await m.addons.trigger_event(_req(tflow.tflow()))
    m.addons.remove(a)
    await m.addons.trigger_event(_req(tflow.tflow()))
    assert log == ["a.request", "a.request", "b.request", "b.request"]


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_a_script_loaded_at_run_time_gets_events(
    manager: type[AddonManager], tmp_path: Path
) -> None:
    """ScriptLoader's scripts change while the proxy runs: they are walked on every event."""
    out = tmp_path / "seen.txt"
    script = tmp_path / "note.py"
    script.write_text(
        f"def request(flow):\n    open({str(out)!r}, 'a').write(flow.request.path + '\\n')\n"
    )
    m = await _master(manager)
    m.addons.add(ScriptLoader())
    await m.addons.trigger_event(hooks.RunningHook())
    await m.addons.trigger_event(_req(tflow.tflow()))  # no script yet: the table is built
    m.options.update(scripts=[str(script)])
    loader = m.addons.get("scriptloader")
    for _ in range(200):  # mitmproxy loads a script from a watcher task
        if any(s.ns is not None for s in loader.addons):
            break
        await asyncio.sleep(0.025)
    await m.addons.trigger_event(_req(tflow.tflow()))
    assert out.read_text() == "/path\n"


@pytest.mark.parametrize("manager", MANAGERS, ids=lambda m: m.__name__)
async def test_an_addon_without_the_hook_is_looked_up_once(manager: type[AddonManager]) -> None:
    """The point of the lean manager: mitmproxy looks every hook up on every addon for every
    event (~300 coroutine round trips per proxied request); the lean one remembers."""
    m = await _master(manager)
    counter = Lookups()
    m.addons.add(counter)
    for _ in range(50):
        await m.addons.trigger_event(_req(tflow.tflow()))
    if manager is LeanAddonManager:
        assert counter.count == 1
    else:
        assert counter.count == 50  # mitmproxy's own manager, for contrast


def test_record_forward_runs_a_config_yaml_script(
    tmp_path: Path, tls_files: TLSFiles, tls_stateful: TLSServer
) -> None:
    """Through the real proxy with the lean manager: a user's script from config.yaml sees the
    flows, and the MCP call is still recorded."""
    seen = tmp_path / "seen.txt"
    script = tmp_path / "note.py"
    script.write_text(
        "def response(flow):\n"
        f"    open({str(seen)!r}, 'a').write(f'{{flow.request.path}} {{flow.response.status_code}}\\n')\n"
    )
    conf = tmp_path / "mitm"
    conf.mkdir()
    (conf / "config.yaml").write_text(
        f"ssl_verify_upstream_trusted_ca: {tls_files.ca_pem}\nscripts: [{script}]\n"
    )
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    with run_forward(tmp_path / "rec.db", conf) as fw:

        async def go() -> int:
            async with fw.http_client() as c:
                r = await c.post(
                    tls_stateful.url,
                    content=body,
                    headers={
                        "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                    },
                )
                return r.status_code

        status = asyncio.run(go())
        assert fw.stop() == 0
    assert seen.read_text() == f"/mcp {status}\n"
    assert any(e["url"].endswith("/mcp") for e in fw.exchanges())
