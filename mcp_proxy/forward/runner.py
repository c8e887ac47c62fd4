"""``mcptape record --forward``: a recording forward proxy, with mcptape's tape, until Ctrl-C.

Two engines feed the same recording (:class:`~mcp_proxy.forward.tape.ForwardTape`) over the same
recorder: ``lean`` (the default, :mod:`mcp_proxy.forward.lean`: mcptape's own CONNECT proxy on
the HTTP relay's core, about a tenth of mitmproxy's CPU per call) and ``mitmproxy`` (``--engine
mitmproxy``, or chosen by itself when ``config.yaml`` sets an option only mitmproxy implements).

For the mitmproxy engine, mitmproxy as it ships — its own master, addon manager, TLS addon and
bytecode, nothing patched or replaced — runs here (the addons mitmdump loads, without its
terminal log and flow dumper), on our event loop, with :class:`~mcp_proxy.forward.addon.McpTape`
(the tape's mitmproxy adapter) added and a :class:`~mcp_proxy.recorder.client.RecorderClient`
shared with it. On start it prints, in a few
lines, the proxy address, where mitmproxy's CA certificate is and the environment common hosts
need to use it. Options a user would give ``mitmdump --set`` are read from
``config.yaml`` in mitmproxy's configuration directory (``~/.mitmproxy``, or
``MCPTAPE_MITMPROXY_CONFDIR``), e.g. ``ssl_verify_upstream_trusted_ca`` for a server whose
certificate a private CA signed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_proxy.errors import UserError
from mcp_proxy.redact import ENV_REDACT, Redactor, redactor_for_recording

if TYPE_CHECKING:
    from mcp_proxy.forward.tape import ForwardTape

__all__ = [
    "ENGINES",
    "ENV_CONFDIR",
    "ENV_ENGINE",
    "ENV_UPSTREAM_IDLE",
    "ca_cert_path",
    "choose_engine",
    "environment_lines",
    "record_forward",
]

ENV_CONFDIR = "MCPTAPE_MITMPROXY_CONFDIR"
#: The forward-proxy engines: mcptape's own (:mod:`mcp_proxy.forward.lean`) and mitmproxy's.
ENGINES = ("lean", "mitmproxy")
#: The engine when ``--engine`` is not given (``lean`` or ``mitmproxy``).
ENV_ENGINE = "MCPTAPE_FORWARD_ENGINE"
DEFAULT_CONFDIR = "~/.mitmproxy"


#: Seconds an idle upstream connection of the lean engine stays open (default
#: ``limits.UPSTREAM_IDLE``), read once at start-up; tests shorten it.
ENV_UPSTREAM_IDLE = "MCPTAPE_FORWARD_UPSTREAM_IDLE"


def upstream_idle() -> float:
    """The lean engine's upstream idle limit: ``MCPTAPE_FORWARD_UPSTREAM_IDLE`` or the default."""
    from mcp_proxy.limits import UPSTREAM_IDLE

    raw = os.environ.get(ENV_UPSTREAM_IDLE, "").strip()
    if not raw:
        return UPSTREAM_IDLE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise UserError(f"{ENV_UPSTREAM_IDLE}={raw!r}: give seconds, more than 0 and at most 3600")
    return value


def confdir() -> Path:
    return Path(os.path.expanduser(os.environ.get(ENV_CONFDIR) or DEFAULT_CONFDIR))


def ca_cert_path(conf: Path) -> Path:
    """The CA certificate (no key) hosts must trust."""
    return conf / "mitmproxy-ca-cert.pem"


def check_ca(conf: Path) -> None:
    """One clear line when mitmproxy's CA exists but cannot be used (it is made when absent)."""
    store = conf / "mitmproxy-ca.pem"
    if conf.exists() and not conf.is_dir():
        raise UserError(f"mitmproxy's configuration directory {conf} is not a directory")
    if not store.exists():
        if conf.exists() and not os.access(conf, os.W_OK):
            raise UserError(
                f"mitmproxy's CA is missing and cannot be created: {conf} is not writable"
            )
        return
    try:
        raw = store.read_bytes()
    except OSError as exc:
        raise UserError(f"mitmproxy's CA {store} is unreadable: {exc.strerror or exc}") from exc
    if b"PRIVATE KEY" not in raw or b"BEGIN CERTIFICATE" not in raw:
        raise UserError(
            f"mitmproxy's CA {store} is not a PEM key and certificate; move it away and a new "
            "CA is made on the next start (hosts must then trust the new one)"
        )


def environment_lines(proxy_url: str, ca: Path) -> list[str]:
    """What to tell the user: where the proxy is, which CA to trust, the env of common hosts."""
    return [
        f"mcptape: forward proxy on {proxy_url} — recording MCP traffic (other traffic passes "
        "untouched)",
        f"mcptape: mitmproxy CA certificate: {ca}",
        f"mcptape:   Node hosts (Claude Code, Node SDK): HTTPS_PROXY={proxy_url} "
        f"NODE_EXTRA_CA_CERTS={ca}",
        f"mcptape:   Python hosts (httpx, requests): HTTPS_PROXY={proxy_url} SSL_CERT_FILE={ca} "
        f"REQUESTS_CA_BUNDLE={ca}",
        "mcptape:   see docs/forward-proxy.md; Ctrl-C stops and finishes the recording",
    ]


def _load_config(opts: Any, conf: Path) -> None:
    """Options from ``config.yaml`` in the confdir, as mitmdump would read them."""
    from mitmproxy import exceptions, optmanager

    path = conf / "config.yaml"
    if path.exists():
        try:
            optmanager.load_paths(opts, str(path))
        except exceptions.OptionsError as exc:
            raise UserError(f"mitmproxy configuration {path}: {exc}") from exc


#: The mitmproxy addons ``record --forward`` loads: what a recording forward proxy needs (the
#: proxy server, layer choice, TLS, DNS, HTTP/2 cleartext refusal), access control (proxy
#: authentication, the block of non-local clients, upstream credentials), ``scripts`` and
#: ``save_stream_file`` from config.yaml. The rest of mitmdump's set is left out: the
#: traffic-changing ones (map/modify/anticache/sticky*/playback — a recording proxy passes the
#: bytes as they are) and the interactive ones (browser, cut, export, comments, command history,
#: onboarding). mitmproxy calls every addon on every event of every flow, so each one left out
#: is work saved per request (measured: about a fifth of the proxy's CPU per call). A user who
#: wants those features runs ``mitmdump -s addons/mcptape.py``.
ADDONS = (
    "Core",
    "Block",
    "ProxyAuth",
    "Proxyserver",
    "ScriptLoader",
    "DnsResolver",
    "NextLayer",
    "DisableH2C",
    "Save",
    "TlsConfig",
    "UpstreamAuth",
)


def _addons() -> list[Any]:
    """mitmproxy's own addons of :data:`ADDONS`, in its order, as it ships them."""
    from mitmproxy import addons

    return [a for a in addons.default_addons() if type(a).__name__ in ADDONS]


class _Errors(logging.Handler):
    """Collects mitmproxy's error log records during start-up (a port in use, a bad option)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Said(logging.Handler):
    """After start-up: mitmproxy's errors (an addon that raised, say) as one stderr line each.

    The start-up collector is removed once the proxy listens: kept, it would hold every error
    record of a long recording in memory, and show none of them.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip()
        first = text.splitlines()[0] if text else record.levelname
        print(f"mcptape: mitmproxy: {first}", file=sys.stderr, flush=True)


def config_options(conf: Path) -> dict[str, Any]:
    """The options ``config.yaml`` in the confdir sets (names and values, not yet checked)."""
    path = conf / "config.yaml"
    if not path.exists():
        return {}
    from ruamel.yaml import YAML

    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except Exception as exc:
        raise UserError(f"mitmproxy configuration {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"mitmproxy configuration {path}: not a mapping of option names")
    return {str(k): v for k, v in data.items()}


def warn_insecure() -> None:
    """``ssl_insecure``: said loudly, once, whichever engine runs (as ``--no-redact`` is)."""
    print(
        "mcptape: WARNING: upstream certificates are NOT verified (ssl_insecure in config.yaml). "
        "Anyone on the path to a server can read and change the traffic the proxy forwards and "
        "records. Use this only for local debugging.",
        file=sys.stderr,
        flush=True,
    )


def choose_engine(asked: str | None, options: dict[str, Any]) -> tuple[str, str | None]:
    """Which engine runs, and why mitmproxy when it was not asked for.

    ``lean`` (:mod:`mcp_proxy.forward.lean`) unless asked otherwise or ``config.yaml`` sets an
    option only mitmproxy implements (scripts, proxy auth, upstream proxies, eager connections…).
    """
    from mcp_proxy.forward.lean import LEAN_OPTIONS

    others = sorted(
        k
        for k, v in options.items()
        if k not in LEAN_OPTIONS or (k == "connection_strategy" and v != "lazy")
    )
    asked = (asked or "").strip().lower() or None
    if asked not in (None, *ENGINES):
        raise UserError(f"unknown forward-proxy engine {asked!r}: choose {' or '.join(ENGINES)}")
    if asked == "mitmproxy":
        return "mitmproxy", None
    if others:
        if asked == "lean":
            raise UserError(
                f"config.yaml option(s) {', '.join(others)} need mitmproxy: use --engine mitmproxy"
                " (or leave --engine out)"
            )
        return "mitmproxy", f"config.yaml sets {', '.join(others)}"
    return "lean", None


async def serve_forward(
    *,
    db_url: str,
    host: str,
    port: int,
    name: str | None,
    redactor: Redactor,
    idle_cut: float,
    record_all: bool = False,
    extra_options: dict[str, Any] | None = None,
    announce: bool = True,
    stop: asyncio.Event | None = None,
    engine: str | None = None,
    output: str = "text",
    faults: Any = None,
    intercepts: Any = None,
) -> int:
    """Run the proxy until ``stop`` (or SIGINT/SIGTERM); returns the exit status.

    ``engine``: ``lean`` or ``mitmproxy`` (default: ``MCPTAPE_FORWARD_ENGINE``, else chosen by
    :func:`choose_engine`). ``extra_options`` are mitmproxy options (they select mitmproxy).
    ``faults``/``intercepts``: fault and intercept rules, carried out by the lean engine only.
    """
    conf = confdir()
    check_ca(conf)
    options = {**config_options(conf), **(extra_options or {})}
    chosen, why = choose_engine(engine or os.environ.get(ENV_ENGINE), options)
    if faults is not None and chosen != "lean":
        raise UserError(
            "--fault/--intercept work with the lean engine of --forward, not mitmproxy"
            + (f" ({why})" if why else "")
        )
    if options.get("ssl_insecure"):
        warn_insecure()
    run = _Run(
        conf,
        db_url,
        host,
        port,
        name,
        redactor,
        idle_cut,
        record_all,
        announce,
        _stop_event(stop),
        output,
        faults,
        intercepts,
    )
    if chosen == "lean":
        return await _serve_lean(run, options)
    return await _serve_mitmproxy(run, extra_options, why)


@dataclasses.dataclass
class _Run:
    """What either engine is given, and the parts they share: recorder, addon, what is said."""

    conf: Path
    db_url: str
    host: str
    port: int
    name: str | None
    redactor: Redactor
    idle_cut: float
    record_all: bool
    announce: bool
    stop: asyncio.Event
    output: str = "text"
    #: Fault and intercept rules (the lean engine's hooks) and where held messages wait.
    faults: Any = None
    intercepts: Any = None

    def recording(self) -> tuple[Any, ForwardTape]:
        """The recorder process (started) and the tape that feeds it."""
        from mcp_proxy.forward.tape import ForwardTape
        from mcp_proxy.recorder.client import RecorderClient

        recorder = RecorderClient(self.db_url, env={ENV_REDACT: self.redactor.to_env()})
        recorder.start()
        tape = ForwardTape(
            recorder,
            redactor=self.redactor,
            name=self.name,
            idle_cut=self.idle_cut,
            record_all=self.record_all,
        )
        return recorder, tape

    def listening(self, bound: tuple[str, int], note: str | None = None) -> None:
        if not self.announce:
            return
        if note:
            print(note, file=sys.stderr, flush=True)
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        for line in environment_lines(f"http://{shown}:{bound[1]}", ca_cert_path(self.conf)):
            print(line, file=sys.stderr, flush=True)

    def stopped(self, tape: ForwardTape) -> int:
        if self.announce:
            from mcp_proxy.relay.stop import StopSummary, print_stop

            print_stop(StopSummary("forward", True, exchanges=tape.stats_exchanges), self.output)
        return 0


def _stop_event(stop: asyncio.Event | None) -> asyncio.Event:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _serve_lean(run: _Run, options: dict[str, Any]) -> int:
    """The lean engine (:mod:`mcp_proxy.forward.lean`) with the same addon and recorder."""
    import ssl

    from mcp_proxy.forward.certs import create_ec_ca
    from mcp_proxy.forward.contexts import LeafContexts, upstream_context
    from mcp_proxy.forward.guard import ClientGuard
    from mcp_proxy.forward.lean import LeanForward, print_refused
    from mcp_proxy.netutil import is_loopback

    conf = run.conf
    try:
        create_ec_ca(conf)
        leaves = LeafContexts(conf)
    except (OSError, ValueError) as exc:
        raise UserError(f"mitmproxy's CA in {conf} cannot be used: {exc}") from exc
    try:
        up_ctx = upstream_context(options)
    except (OSError, ssl.SSLError) as exc:
        leaves.close()
        raise UserError(
            f"mitmproxy configuration {conf / 'config.yaml'}: the upstream trust cannot be "
            f"loaded: {exc}"
        ) from exc
    recorder, tape = run.recording()
    guard = None
    if not is_loopback(run.host):
        print(
            f"mcptape: warning: the forward proxy listens on {run.host}: other machines can use "
            "it and have their traffic recorded (clients with public addresses are refused: "
            "block_global)",
            file=sys.stderr,
            flush=True,
        )
        guard = ClientGuard(
            block_global=bool(options.get("block_global", True)),
            block_private=bool(options.get("block_private", False)),
        )
    refused = print_refused(ca_cert_path(conf))
    proxy = LeanForward(
        tape,
        leaves,
        up_ctx,
        on_tls_refused=refused,
        guard=guard,
        upstream_idle=upstream_idle(),
        faults=run.faults,
        intercepts=run.intercepts,
    )
    try:
        try:
            bound = await proxy.listen(run.host, run.port)
        except OSError as exc:
            raise UserError(
                f"cannot start the forward proxy on {run.host}:{run.port}: {exc.strerror or exc}"
            ) from exc
        run.listening(bound)
        await run.stop.wait()
    finally:
        if run.intercepts is not None:  # a message still held is let go before the close
            run.intercepts.close()
        await proxy.close(grace=5.0)
        tape.close()
        leaves.close()
        await asyncio.to_thread(recorder.close)
    return run.stopped(tape)


async def _serve_mitmproxy(run: _Run, extra_options: dict[str, Any] | None, why: str | None) -> int:
    """mitmproxy's master in-process, with mcptape's addon."""
    from mitmproxy import exceptions, options
    from mitmproxy.master import Master

    from mcp_proxy.forward.certs import create_ec_ca

    conf, host, port = run.conf, run.host, run.port
    # Lazy upstream connections: the upstream is dialled when the host's request is known, so a
    # server that is down or fails TLS is an outcome of that (MCP) request — recorded, with the
    # request — rather than a refused CONNECT no one can attribute. config.yaml may override.
    opts = options.Options(listen_host=host, listen_port=port, confdir=str(conf))
    errors = _Errors()
    said = _Said()
    mitm_log = logging.getLogger("mitmproxy")
    mitm_log.addHandler(errors)
    master = Master(opts)
    try:
        # Before TlsConfig is added (it makes an RSA CA when there is none): a CA made here
        # has a P-256 key, the key of every host-side handshake (mcp_proxy/forward/certs.py).
        create_ec_ca(conf)
        master.addons.add(*_addons())
        opts.update(connection_strategy="lazy")
        _load_config(opts, conf)
        if opts.deferred:
            names = ", ".join(sorted(opts.deferred))
            raise UserError(
                f"mitmproxy configuration {conf / 'config.yaml'}: option(s) {names} unknown "
                "to record --forward (it loads no traffic-changing addons); use "
                "mitmdump -s addons/mcptape.py for those"
            )
        if extra_options:
            opts.update(**extra_options)
    except exceptions.OptionsError as exc:
        raise UserError(f"mitmproxy: {exc}") from exc
    except OSError as exc:
        raise UserError(f"mitmproxy's CA in {conf} cannot be used: {exc}") from exc

    from mcp_proxy.forward.addon import McpTape

    recorder, tape = run.recording()
    addon = McpTape(tape)
    master.addons.add(addon)
    running = asyncio.create_task(master.run())
    try:
        ps = master.addons.get("proxyserver")
        addrs: list[Any] = []
        for _ in range(400):
            if running.done() or errors.records:
                break
            addrs = list(ps.listen_addrs())
            if addrs:
                break
            await asyncio.sleep(0.025)
        if not addrs:
            first = errors.records[0].getMessage() if errors.records else "it did not start"
            first = first.strip().splitlines()[0] if first.strip() else "it did not start"
            raise UserError(f"cannot start the forward proxy on {host}:{port}: {first}")
        mitm_log.removeHandler(errors)
        mitm_log.addHandler(said)
        note = f"mcptape: forward engine: mitmproxy ({why})" if why else None
        run.listening((str(addrs[0][0]), int(addrs[0][1])), note)
        waiter = asyncio.create_task(run.stop.wait())
        await asyncio.wait({running, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    finally:
        master.shutdown()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(running, 10)
        addon.close()  # idempotent: done() closed the sessions if mitmproxy got that far
        mitm_log.removeHandler(errors)
        mitm_log.removeHandler(said)
        await asyncio.to_thread(recorder.close)
    return run.stopped(tape)


def record_forward(
    *,
    db_url: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    name: str | None = None,
    redact: bool = True,
    redact_headers: list[str] | tuple[str, ...] = (),
    redact_paths: list[str] | tuple[str, ...] = (),
    idle_cut: float = 300.0,
    engine: str | None = None,
    output: str = "text",
    faults: Any = None,
    intercepts: Any = None,
) -> int:
    """``mcptape record --forward``: serve until SIGINT/SIGTERM; exit status (``output``:
    ``json`` makes the last line on stderr a JSON summary, :mod:`mcp_proxy.relay.stop`)."""
    from mcp_proxy.forward import require_mitmproxy

    require_mitmproxy()
    redactor = redactor_for_recording(redact, redact_headers, redact_paths)
    logging.getLogger("mitmproxy").setLevel(logging.WARNING)
    from mcp_proxy.relay.http.run import loop_factory

    try:
        return asyncio.run(
            serve_forward(
                db_url=db_url,
                host=host,
                port=port,
                name=name,
                redactor=redactor,
                idle_cut=idle_cut,
                engine=engine,
                output=output,
                faults=faults,
                intercepts=intercepts,
            ),
            loop_factory=loop_factory(),
        )
    except KeyboardInterrupt:
        return 130
