"""Profile the recorder process on a burst, without a relay: where its CPU goes per frame.

    uv run python benchmarks/profile_recorder.py [--frames 100000] [--pg URL] [--profile]
                                                 [--no-redact] [--stages]

The records a relay would write into the recorder's pipe for a stdio burst (the request, ``N``
``notifications/message`` lines in 64 KiB reads, the reply, the session's start and end) are
packed by the real :class:`~mcp_proxy.recorder.client.RecorderClient` code into a file, and the
real worker loop (:func:`mcp_proxy.recorder.worker.serve`) reads that file as it would read the
pipe. Figures: CPU µs per frame (``getrusage``, the figure that survives a busy machine), frames
per CPU second, and with ``--profile`` the top of a cProfile of the worker.

``--stages`` times each stage of the worker on its own (CPU time, best of ``--rounds``): reading
the records into items (:class:`~mcp_proxy.recorder.worker._Session`), the batch builder
(framing, redaction prefilter, classification, numbering: ``feed`` + ``take``, batches cut as
the worker cuts a burst), and the store's insert of the batches it built
(``BatchWriter.write``, the store's share — on the worker's insert thread, beside the builder).

Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mcp_proxy.frames import Channel, Direction  # noqa: E402
from mcp_proxy.recorder.client import RecorderClient  # noqa: E402
from mcp_proxy.recorder.contract import Producer  # noqa: E402

#: The worker's batch size (frames), as :func:`mcp_proxy.recorder.worker.serve` uses it.
MAX_BATCH = 2000


class _FileClient(RecorderClient):
    """A RecorderClient whose 'pipe' is a file: the exact bytes a relay would send."""

    def __init__(self, fd: int) -> None:
        super().__init__("sqlite:///unused")
        self._fd = fd
        self.proc = None

    def _send(self, parts: list[bytes], sid: str | None = None, frames: int = 0) -> None:
        os.writev(self._fd, parts)


def burst_records(path: str, n: int) -> int:
    """Write the records of an ``n``-notification burst session to ``path``; frames in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    client = _FileClient(fd)
    sid = Producer.new_session(client, transport="stdio", name="burst", command=["rawecho"])
    req = b'{"jsonrpc":"2.0","id":1,"method":"burst"}\n'
    client.put_chunk(sid, Direction.C2S, Channel.STDIO, req)
    out = b"".join(
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%d}}\n'
        % k
        for k in range(1, n + 1)
    )
    out += b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    for i in range(0, len(out), 1 << 16):
        client.put_chunk(sid, Direction.S2C, Channel.STDIO, out[i : i + (1 << 16)])
    client.end_session(sid, status="ended", exit_code=0)
    os.close(fd)
    return n + 2


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stages(records: str, frames: int, url_of: Callable[[int], str], rounds: int) -> None:
    """CPU µs per frame of each stage of the worker, each timed alone (best of ``rounds``)."""
    from mcp_proxy.recorder.builder import BatchBuilder
    from mcp_proxy.recorder.contract import Resume
    from mcp_proxy.recorder.worker import BATCH_BYTES, _Session
    from mcp_proxy.redact import policy_from_env
    from mcp_proxy.store.engine import ensure_schema
    from mcp_proxy.store.writer import BatchWriter

    data = Path(records).read_bytes()
    items: list[Any] = []

    class _Collect:
        builder = BatchBuilder()

        def feed(self, item: Any) -> None:
            items.append(item)

    def decode() -> None:
        items.clear()
        state = _Session(_Collect())  # type: ignore[arg-type]
        for i in range(0, len(data), 1 << 20):
            state.buf += data[i : i + (1 << 20)]
            state.consume()

    policy = policy_from_env()
    batches: list[Any] = []

    def build() -> None:
        batches.clear()
        b = BatchBuilder(redact=policy if policy.enabled else None)
        for item in items:
            if type(item) is not Resume:
                b.feed(item)
                if b.pending_bytes > BATCH_BYTES or b.pending_frames >= MAX_BATCH:
                    batches.append(b.take())  # cut as the worker cuts a burst
        batches.append(b.take())

    rnd = iter(range(1 << 30))

    def store() -> float:
        url = url_of(next(rnd))
        ensure_schema(url)
        writer = BatchWriter.open(url)
        c0 = _cpu()
        for batch in batches:
            writer.write(batch)
        cpu = _cpu() - c0
        writer.close()
        return cpu

    def timed(fn: Callable[[], None]) -> float:
        c0 = _cpu()
        fn()
        return _cpu() - c0

    t_decode = min(timed(decode) for _ in range(rounds))
    t_build = min(timed(build) for _ in range(rounds))
    t_store = min(store() for _ in range(rounds))
    mine = t_decode + t_build
    for label, t in (
        ("read records → items", t_decode),
        ("builder (framing, redaction, classification, rows)", t_build),
        ("recorder's own share (the two above)", mine),
        (f"store insert (BatchWriter.write of {len(batches)} batches)", t_store),
        ("total CPU", mine + t_store),
        ("critical path on two free cores (the larger share)", max(mine, t_store)),
    ):
        print(f"stage  {t / frames * 1e6:6.2f} µs/frame  {label}")
    print(
        "(the worker runs the store insert on its insert thread beside the builder; SQLite's"
        " own part of it runs without the GIL)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--pg", help="a PostgreSQL URL to record into instead of a SQLite file")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-redact", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--stages", action="store_true", help="time each stage on its own")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.no_redact:
        os.environ["MCPTAPE_REDACT"] = "0"
    from mcp_proxy.recorder.worker import serve
    from mcp_proxy.store.engine import ensure_schema

    with tempfile.TemporaryDirectory() as tmp:
        url = args.pg or "sqlite:///" + str(Path(tmp) / "p.db")
        ensure_schema(url)
        records = str(Path(tmp) / "records.bin")
        frames = burst_records(records, args.frames)
        if args.stages:
            stages(
                records,
                frames,
                lambda k: args.pg or "sqlite:///" + str(Path(tmp) / f"s{k}.db"),
                args.rounds,
            )
            return
        fd = os.open(records, os.O_RDONLY)
        prof = cProfile.Profile(time.process_time) if args.profile else None
        c0, t0 = _cpu(), time.perf_counter()
        if prof is not None:
            prof.enable()
        serve(url, fd, flush_interval=0.0)
        if prof is not None:
            prof.disable()
        cpu, wall = _cpu() - c0, time.perf_counter() - t0
        os.close(fd)
        print(
            f"recorder: {frames} frames, CPU {cpu:.3f} s = {cpu / frames * 1e6:.2f} µs/frame"
            f" ({frames / cpu:,.0f} frames per CPU s), wall {wall:.3f} s"
            f" ({frames / wall:,.0f} frames/s)"
        )
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
