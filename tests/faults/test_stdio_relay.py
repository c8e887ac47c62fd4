"""The fault pumps in the real stdio relay, in-process, with a raw line server (no SDK: fast).

What the SDK tests cannot show cheaply: faults on the host's side of the wire (duplicate,
corrupt, reorder of requests), that a delayed frame does not hold the frames behind it, and a
rules file edited while the relay runs — a good edit applies at once, a bad one keeps the last
good rules and says so once on stderr.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_proxy.faults import FaultEngine, RulesFile
from mcp_proxy.recorder.runner import Recorder
from mcp_proxy.relay.stdio import StdioRelay
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(60)


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "relay.sqlite"
        self.rules = tmp / "faults.toml"
        self.rules.write_text("")
        self.recorder = Recorder(f"sqlite:///{self.db}")
        self.recorder.start()
        self.host_r, self.to_relay = os.pipe()
        self.from_relay, self.host_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        source = RulesFile(self.rules, interval=0.05, warn=self._warn)
        self.warnings: list[str] = []
        self.relay = StdioRelay(
            [sys.executable, "-m", "mcp_proxy.testing.rawecho"],
            recorder=self.recorder,
            name="relay",
            stdin_fd=self.host_r,
            stdout_fd=self.host_w,
            stderr_fd=self.err_w,
            faults=FaultEngine(source=source),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.thread = threading.Thread(target=self.relay.run, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.next_id = 100

    def _warn(self, message: str) -> None:
        self.warnings.append(message)

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self.from_relay, 65536):
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                self.lines.put(line)

    def set_rules(self, text: str) -> None:
        self.rules.write_text(text)
        time.sleep(0.1)

    def send(self, *methods: str) -> list[int]:
        ids = []
        for method in methods:
            self.next_id += 1
            ids.append(self.next_id)
            msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
            os.write(self.to_relay, json.dumps(msg).encode() + b"\n")
        return ids

    def answers(self, n: int, timeout: float = 5.0) -> list[int]:
        out = []
        for _ in range(n):
            out.append(json.loads(self.lines.get(timeout=timeout))["id"])
        return out

    def quiet(self, wait: float = 0.3) -> bool:
        try:
            self.lines.get(timeout=wait)
        except queue.Empty:
            return True
        return False


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp("relay"))
    r.thread.start()
    r.reader.start()
    yield r
    os.close(r.to_relay)
    r.thread.join(10)
    r.recorder.close()


def test_a_delayed_frame_does_not_hold_the_frames_behind_it(rig: Rig) -> None:
    rig.set_rules('[[fault]]\naction = "delay"\nms = 300\nmethod = "slow"\ndirection = "s2c"\n')
    slow, fast = rig.send("slow", "fast")
    assert rig.answers(2) == [fast, slow]


def test_duplicate_and_reorder_requests(rig: Rig) -> None:
    rig.set_rules('[[fault]]\naction = "duplicate"\nmethod = "twice"\ndirection = "c2s"\n')
    [twice] = rig.send("twice")
    assert rig.answers(2) == [twice, twice]  # the server got it twice and answered twice
    rig.set_rules('[[fault]]\naction = "reorder"\nmethod = "first"\ndirection = "c2s"\n')
    first, second = rig.send("first", "second")
    assert rig.answers(2) == [second, first]


def test_a_corrupted_request_is_what_the_server_gets(rig: Rig) -> None:
    rig.set_rules('[[fault]]\naction = "corrupt"\nmode = "invalid-json"\nmethod = "bad"\n')
    [bad] = rig.send("bad")
    assert rig.quiet()  # the raw server skips a line that does not parse, as it would

    def injected() -> list[dict]:
        return [
            f
            for f in rdb.frames(rig.db)
            if f["channel"] == "inject" and f["direction"] == "c2s" and f["msg_id"] is None
        ]

    assert rdb.wait_until(lambda: injected(), timeout=10)
    assert (
        injected()[-1]["raw"].startswith(b"{,") and f'"id": {bad}'.encode() in injected()[-1]["raw"]
    )


def test_a_bad_edit_keeps_the_last_good_rules_and_warns_once(rig: Rig) -> None:
    rig.set_rules('[[fault]]\naction = "drop"\nmethod = "gone"\n')
    rig.send("gone")
    assert rig.quiet()
    rig.set_rules('[[fault]]\naction = "drop"\nmethod = "gone"\nms = 5\n')  # drop takes no ms
    rig.send("gone")
    rig.send("gone")
    assert rig.quiet()  # still dropped: the last good rules hold
    assert len(rig.warnings) == 1 and "drop does not take 'ms'" in rig.warnings[0]
    rig.set_rules('[[fault]]\naction = "http"\nstatus = 503\n')  # HTTP only: said, ignored
    [passed] = rig.send("gone")
    assert rig.answers(1) == [passed]
    said = os.read(rig.err_r, 4096).decode()
    assert said == "mcptape: 'http status=503' cannot be carried out on stdio; ignored\n"
    rig.set_rules("")  # faults off while connected
    [back] = rig.send("gone")
    assert rig.answers(1) == [back]


ASKING_SERVER = (
    "import sys\n"
    'sys.stdout.write(\'{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage"}\\n\')\n'
    "sys.stdout.flush()\n"
    "got = sys.stdin.readline()\n"
    "sys.stdout.write(got)  # show the host what the server was answered\n"
    "sys.stdout.flush()\n"
)


def test_an_error_answers_a_servers_request_in_the_hosts_place(tmp_path: Path) -> None:
    from mcp_proxy.faults import parse_rule

    recorder = Recorder(f"sqlite:///{tmp_path / 'ask.sqlite'}")
    recorder.start()
    host_r, to_relay = os.pipe()
    from_relay, host_w = os.pipe()
    rule = "error code=-1 message=no direction=s2c method=sampling/createMessage"
    relay = StdioRelay(
        [sys.executable, "-c", ASKING_SERVER],
        recorder=recorder,
        stdin_fd=host_r,
        stdout_fd=host_w,
        faults=FaultEngine([parse_rule(rule)]),
    )
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(relay.run()), daemon=True)
    thread.start()
    got = b""
    while not got.endswith(b"\n"):
        got += os.read(from_relay, 4096)
    os.close(to_relay)
    thread.join(10)
    recorder.close()
    for fd in (host_r, from_relay, host_w):
        os.close(fd)
    # the host never saw the request; the server got the error, with its own id
    assert json.loads(got) == {"jsonrpc": "2.0", "id": "s1", "error": {"code": -1, "message": "no"}}


def test_delaying_a_burst_keeps_order_and_takes_no_thread_per_frame(rig: Rig) -> None:
    rig.set_rules('[[fault]]\naction = "delay"\nms = 600\nmethod = "many"\ndirection = "c2s"\n')
    before = threading.active_count()
    ids = rig.send(*["many"] * 300)
    time.sleep(0.2)  # all read and scheduled, none delivered yet
    assert threading.active_count() <= before + 2  # one delivery thread, not 300 timers
    assert rig.answers(300) == ids
