"""Every byte, count and time budget of mcptape, each with its reason.

mcptape sits between two peers and trusts neither to be small: a compressed body may inflate
a thousandfold, a chunked stream may never end, an id may be megabytes long, a JSON value may
nest a million levels deep. Every buffer, cache, pool, map and queue that holds what a peer sent
is sized here, in one place, so that a new buffer nobody sized stands out in review and the
limits are easy to find and to test. What happens at each limit is in docs/reliability.md
("Limits"): past a limit mcptape forwards anyway, records what fits and says so with a finding.

This module is core: it imports nothing of the project. The bounded helpers that enforce these
limits (bounded inflate, capped reads, an LRU with an idle sweep) live in ``mcp_proxy.bounded``.
"""

from __future__ import annotations

# --- The stdio relay ---

#: Bytes per read of a stdio stream: one read is one write to the peer and one record, never a line
#: buffer (a longer line simply takes several reads).
STDIO_READ = 1 << 16

# --- The HTTP relay (reverse: ``record --upstream``), also served by the lean forward engine ---

#: Request bodies up to this size (with a Content-Length) are read whole before forwarding — one
#: write upstream; larger or chunked bodies stream through.
SMALL_BODY = 1 << 20
#: Response bodies with a Content-Length up to this size are read whole and sent in one write.
SMALL_RESPONSE = 256 * 1024
#: The most bytes of one body kept for the recording (the relay forwards everything).
MAX_RECORDED_BODY = 64 << 20
#: The most bytes a compressed body (``Content-Encoding`` gzip, deflate, br, zstd) is inflated
#: to for the recording: a 5 MB gzip body of zeros inflates to 5 GiB and a 1 MB brotli one to
#: more, so decoding stops at the recorded-body limit. The body itself is forwarded unchanged.
MAX_INFLATED_BODY = MAX_RECORDED_BODY
#: Bytes of compressed input handed to a decoder per step, and bytes of output asked of it per
#: step: what a decoder holds beyond the inflated body itself stays this small.
INFLATE_STEP = 1 << 20
#: Non-MCP bodies (OAuth, discovery documents) are kept in exchange meta up to this size.
META_BODY_LIMIT = 64 << 10
#: How long the rest of an event stream is read after the host left with its response.
TAIL_READ = 1.0
#: How long the head of a response whose body is not in yet waits for its first body bytes, to go
#: out with them: servers (uvicorn) write the head a moment before the body — a JSON answer, an
#: event stream's first event — and one write is one TLS record and one wake-up of the host
#: instead of two. A quiet stream's head goes alone after it. The reverse relay and the lean
#: forward engine.
HEAD_HOLD = 0.003
#: Seconds in-flight exchanges get to finish when the relay stops.
SHUTDOWN_GRACE = 2.0
#: How much of a GET event-stream is held back looking for a legacy ``endpoint`` event.
ENDPOINT_HOLD_LIMIT = 64 << 10
#: Longest request line (method, target, version) accepted.
MAX_LINE = 64 * 1024
#: Longest header field (name or value) accepted.
MAX_FIELD = 64 * 1024
#: Longest request head (request line and headers) accepted as a whole.
MAX_HEAD = 256 * 1024
#: A request body buffered past this pauses reading from the host (flow control).
BODY_HIGH = 1 << 20
#: An upstream response body buffered past this (not yet taken by the relay) pauses reading
#: from the upstream (flow control; aiohttp's client paused at twice its 64 KiB read size).
UPSTREAM_BODY_HIGH = 1 << 17
#: Longest upstream response head (status line and headers) accepted as a whole.
UPSTREAM_MAX_HEAD = 256 * 1024
#: Pipelined requests queued behind the one being handled before reading pauses.
MAX_QUEUED = 8
#: An idle keep-alive connection is closed after this many seconds (aiohttp's default).
KEEPALIVE_IDLE = 75.0
#: How long the rest of a body the upstream did not take is read (and dropped) before closing.
LINGER = 10.0
#: Bodies up to this size are parsed in full to find the client identity; larger ones are searched
#: with a bounded regular expression over their head instead.
IDENTITY_PARSE_LIMIT = 256 * 1024

# --- The forward proxy (``record --forward``) ---

#: The longest proxy request head (CONNECT line and headers) accepted.
MAX_PROXY_HEAD = 64 * 1024
#: How long a new connection may take to send its proxy request (and a tunnel its first byte).
ENTRY_IDLE = 75.0
#: How long a host has for its TLS handshake with the proxy.
HANDSHAKE_TIMEOUT = 30.0
#: Responses with a Content-Length above this (or none, when not JSON) are streamed by the
#: mitmproxy engine, not buffered by it.
STREAM_ABOVE = 1 << 20
#: Seconds a pooled upstream connection of the lean engine stays open unused: under the 5 s of
#: uvicorn and Node servers, so the proxy drops it before the server closes it under a request
#: (requests are never re-sent). A per-origin pool unused this long is dropped too.
#: ``MCPTAPE_FORWARD_UPSTREAM_IDLE`` (seconds) overrides it at start-up (tests).
UPSTREAM_IDLE = 4.0
#: How often the lean engine's timer closes idle upstream connections and drops idle pools: a
#: connection is closed at most this long after its idle time ran out.
POOL_SWEEP_INTERVAL = 1.0
#: Per-origin upstream pools the lean engine keeps (least recently used dropped first): a host
#: talking to thousands of origins (a crawler through ``HTTPS_PROXY``) holds at most this many
#: pools' sockets, each pool's in-flight requests finishing on their own connections.
MAX_UPSTREAM_POOLS = 256
#: When the upstream cannot be reached before a streamed request body went out, how long the
#: lean engine still reads the host's body (up to ``MAX_RECORDED_BODY`` kept) so the failed
#: exchange is recorded with it, as the reverse relay does.
REQUEST_DRAIN = 5.0
#: Idle keep-alive connections one upstream pool keeps; a burst of parallel calls leaves at
#: most this many open afterwards (the oldest closed first).
MAX_IDLE_PER_POOL = 32

# --- The recorder: the pipe from a relay, its backlog, the recorder process ---

#: Bytes of the relay → recorder pipe (Linux F_SETPIPE_SZ): bursts rarely touch the backlog.
PIPE_SIZE = 1 << 20
#: How many times a dead worker is replaced before recording stops (the relay goes on).
MAX_RESTARTS = 3
#: Largest piece handed to the pipe from the spill file at once.
BACKLOG_READ = 1 << 20
#: Seconds a server group gets between SIGTERM and SIGKILL when its relay vanished.
GROUP_GRACE = 2.0
#: Seconds the worker keeps retrying at the end while the database refuses writes (full disk, a
#: lock): what it owes the database (gaps, the session's end) is written once it can be.
FINISH_PATIENCE = 120.0
#: Bytes of frames per batch under a burst: one batch is built while the one before is written, so
#: the recorder holds two (~5,800 small frames each, ~3 MiB of rows each).
BATCH_BYTES = 512 << 10
#: Bytes per read of the pipe: a batch is cut after a read, so a read is well under a batch.
READ_BYTES = 128 << 10
#: Distinct header sets (the pairs as sent) whose described, redacted columns the recorder keeps:
#: a client sends the same request headers on every call and an upstream nearly the same response
#: headers (its ``Date`` changes once a second), so most exchanges find theirs described already.
#: Emptied when full; ~1 KiB each: ~0.5 MB at the limit.
HEADER_MEMO = 512
#: The largest header set (names and values as sent, in bytes) :data:`HEADER_MEMO` keeps: a
#: peer's headers can be far larger than a client's usual few hundred bytes, and the memo must
#: not hold 512 of those. A larger set is described each time. At most ~2 MB of keys in all.
HEADER_MEMO_SET_BYTES = 4096
#: HTTP exchanges the recorder remembers (local id → database id) while they are open, so that
#: their later updates and frames find their row. An exchange is forgotten when it ends; these
#: are for exchanges that never end (a stream left open for the life of a relay): past this the
#: oldest is forgotten, and what still comes for it is written without its exchange link
#: (counted in ``BatchWriter.exchanges_forgotten``). ~100 bytes each: ~10 MB at the limit.
MAX_OPEN_EXCHANGES = 100_000
#: Exchanges that ended, still remembered: the tail of an event stream read after the host left
#: (``TAIL_READ``) may bring a frame or an update after the exchange's end.
ENDED_EXCHANGES_KEPT = 4096

#: Ended sessions the recorder process holds for analysis (their findings stored when the
#: session ends, so the first ``check`` is a read): past it an ended session is not queued and
#: its first ``check`` analyses it instead.
SETTLE_QUEUE = 1000
#: Seconds the recorder process, its recording written, waits for the analysis of the sessions
#: that ended (the relay waits up to 60 s for the recorder process): past it the process exits
#: and those sessions' first ``check`` analyses them instead.
SETTLE_PATIENCE = 30.0

# --- Live OpenTelemetry export (``record --otlp-endpoint``, in the recorder process) ---

#: Frames (requests, answers, cancels) waiting for the exporter thread: past this they are
#: dropped and their spans counted as not sent; the recording is not touched.
OTLP_QUEUE_FRAMES = 20_000
#: Bytes of those frames kept for the exporter (a frame holds at most ``OTLP_FRAME_BYTES``).
OTLP_QUEUE_BYTES = 16 << 20
#: Frames up to this size are parsed for their span (tool name, ``traceparent``, error message);
#: of a larger one only its tail (``OTLP_TAIL_BYTES``) is kept, to find ``"isError": true``.
OTLP_FRAME_BYTES = 64 << 10
#: The tail kept of a larger frame (``isError`` ends a tool result).
OTLP_TAIL_BYTES = 4 << 10
#: Requests waiting for their answer, all sessions together: past this the oldest is sent as a
#: span of outcome ``pending`` (a server that never answers cannot grow the exporter).
OTLP_PENDING = 10_000
#: Sessions the exporter knows at once (a forward proxy may see many): past this the oldest is
#: ended as if its session ended (its pending requests sent, its session span sent).
OTLP_SESSIONS = 1_000
#: Tasks the exporter follows at once (all sessions) to send each one's span when it ends: past
#: this the oldest is sent as it stands, unended (a server that never ends its tasks, or a
#: client that never polls, cannot grow the exporter). Each holds up to ``OTLP_TASK_EVENTS``
#: events: measured, 1,000 tasks of 128 events each are ~16 MB (10,000 were 157 MB).
OTLP_TASKS = 1_000
#: Spans per POST: a burst is sent in a few requests, none of them large.
OTLP_BATCH_SPANS = 512
#: The longest a finished span waits before it is sent ("live": well under a second).
OTLP_FLUSH_SECONDS = 0.5
#: Seconds one POST may take (connect and answer) before its spans are dropped and counted.
OTLP_POST_TIMEOUT = 2.0
#: Seconds the recorder process spends at exit sending what is left before it gives up on it.
OTLP_CLOSE_PATIENCE = 5.0
#: Seconds a collector that failed a POST is left alone (spans finishing meanwhile are counted,
#: not built: a dead collector costs no CPU); doubled on each failure in a row.
OTLP_BACKOFF_MIN = 1.0
#: The longest it is left alone: a collector that comes back gets spans again within this.
OTLP_BACKOFF_MAX = 30.0

# --- Classifying and comparing frames ---

#: Frames larger than this are classified from a bounded look at their head and tail instead of a
#: full parse, so that a 64 MiB message does not cost several times its size in memory while it is
#: recorded. ``Classified.partial`` says when that happened.
FULL_PARSE_LIMIT = 8 * 1024 * 1024
#: The longest id text a ``msg_id`` column holds (``frames.msg_id`` is VARCHAR(300)).
MAX_ID_TEXT = 300
#: Deepest nesting a step value keeps. JSON-RPC messages of real servers nest a few dozen levels; a
#: frame nested ~1,200 levels deep is still recordable (and parses), but every recursive walk over
#: it (normalising, comparing, rendering) would exhaust Python's stack. Below this depth a value is
#: replaced by :func:`too_deep_marker`, which keeps a digest so that two different deep values
#: still compare as different.
MAX_DEPTH = 128
#: Levels of nesting ``show`` pretty-prints (its printer recurses once per level): a deeper body
#: prints as its raw text. Far below Python's recursion limit, so the printer never runs the
#: stack out — near that limit a garbage collection that finalises something (a generator's
#: ``finally``) has no stack left, and its error escapes as an "unraisable" exception.
PRETTY_DEPTH = 500

# --- Analysis ---

#: stderr lines the transport findings quote (the tail before a crash) and so keep.
STDERR_TAIL = 8

#: Individual findings kept per code; beyond that they are folded into one "… and N more".
PER_CODE_CAP = 50
#: Frame references kept per finding (a proof, not a copy of the session).
MAX_SEQS = 1000
#: Distinct names (methods, capability keys) one finding of the protocol checks collects: a peer
#: may send any number of invented methods; past this the finding still counts them all and names
#: the first ones.
LIMIT_METHODS_NAMED = 64
#: nextCursor values the pagination check remembers per list method (to tell a cursor the server
#: returned from one it never did): past this the oldest are forgotten, and a request naming one
#: is reported as an unknown cursor.
LIST_CURSORS_KEPT = 10_000
#: Walks over a list's pages whose identifiers the duplicate check holds at once (a new walk
#: begins with every list request without a cursor): the oldest walk is forgotten first.
LIST_WALKS_KEPT = 64
#: Identifiers (tool names, URIs) kept per walk, and duplicates already reported: past this a
#: walk's later items are not compared.
LIST_IDS_KEPT = 10_000
#: How far (monotonic ns) the pairing looks ahead for a message of the other side that a
#: message refers to: the relay stamps each direction on its own thread, so a host's retry can be
#: stamped a scheduling slice before the server result it answers (analysis/reorder.py).
REORDER_WINDOW_NS = 100_000_000
#: Messages the incremental pairing holds ahead of the one it handles (at most; fewer once one
#: is past :data:`REORDER_WINDOW_NS`): the bound of its look-ahead buffer, whatever the session's
#: size.
REORDER_LOOKAHEAD = 5_000
#: Answered requests the pairing remembers (newest kept), by id, by progress token and by HTTP
#: exchange: what a late progress notification, a cancel that crossed the response, a duplicate
#: answer or a log on the request's stream still finds. Past it, such a late message is reported
#: as for an unknown request.
ANSWERED_KEPT = 5_000
#: Request ids the pairing remembers to report an id reused after its request completed
#: (initialize era): a reuse further back than this many requests goes unreported.
REQUEST_IDS_KEPT = 50_000
#: Distinct values one method's latency histogram (and its task durations') holds in ``stats``
#: (stored per session in ``session_stats``, pooled across sessions): latencies are whole
#: microseconds, so this keeps every value of a method whose answers spread over 100 ms (~10 MB
#: in memory, ~2 MB stored, at the limit). Past it a new value is left out — its exchange is
#: still counted — and the method's numbers say how many were (``dropped``).
STATS_VALUES_KEPT = 100_000
#: Methods (direction, method and tool/prompt/resource name, a peer's strings) one session's
#: numbers keep apart: each holds two histograms. A real server has tens; a peer inventing a new
#: method or tool name per request would grow the table with every exchange. Past it the
#: exchanges of a method not yet kept are counted together under :data:`OTHER_METHODS`.
STATS_METHODS_KEPT = 2_000
#: Exchanges ``show -x`` holds to print them in request order: an exchange answered early waits
#: for every earlier-started one, and a printed one can no longer gain frames, so it also waits
#: while the pairing may still attach late frames to it (it remembers :data:`ANSWERED_KEPT`
#: answered requests). Past it (a request pending while this many later ones were answered) the
#: rest print in the order they were answered, with one line on stderr.
SHOW_EXCHANGES_HELD = ANSWERED_KEPT
#: Tasks (MCP tasks, both eras) the pairing follows at once, by task id: each holds its creating
#: exchange, its status and counts. Past it the oldest task is forgotten (counted and reported
#: with ``task.untracked``); a later poll for it is not reported as for an unknown task.
MAX_TASKS_TRACKED = 10_000
#: Status changes kept per task for its lifecycle (created → working → … → completed); polls
#: that repeat a status are folded. Past it the later changes are counted, not listed.
TASK_STATUSES_KEPT = 32
#: Characters of a task id or status the analysis keeps (a peer may send any string): a longer
#: one is cut to this many, and still identifies its task unless two differ only past the cut.
TASK_TEXT_CHARS = 256
#: Skill files (SEP-2640 skills extension) whose listed digest and size the analysis keeps, from
#: ``skills/list`` and ``skills/get`` entries, to compare each ``resources/read`` of them with
#: (the extension allows 512 files per skill; a listing may name any number of skills). Past it
#: the oldest listed file is forgotten: a later read of it is not compared.
SKILL_FILES_KEPT = 10_000
#: Characters of a listed skill file's URI the analysis keeps it under (a peer may send any
#: string): a file with a longer URI is not followed (its reads are not compared), so the kept
#: URIs stay under SKILL_FILES_KEPT × this many characters.
SKILL_URI_CHARS = 2_048
#: Events (status changes and polls) one task's OTLP span carries: the OpenTelemetry SDK's own
#: default span limit. Past it the rest are counted in ``mcp.task.events_dropped``.
OTLP_TASK_EVENTS = 128

# --- The store, import and export ---

#: Characters of one annotation's text: a note, not a copy of a recording.
NOTE_MAX = 20_000
#: Bytes read from a recording file at a time by ``import`` (JSON Lines): the file is streamed,
#: never read whole, so an import's memory does not grow with the file.
IMPORT_READ = 1 << 20
#: The longest line of a JSON Lines recording ``import`` reads (and ``diff``/``replay`` of a file).
#: A frame holds at most ``MAX_RECORDED_BODY`` bytes; as JSON text (escapes) or base64 it takes a
#: few times that. A longer line was not written by mcptape: it is refused, naming its line.
IMPORT_LINE_MAX = 8 * MAX_RECORDED_BODY
#: Frames an import holds before it writes them (one page: one ``executemany`` or ``COPY``, and
#: what the redaction prefilter looks at together); more frames never mean more memory.
IMPORT_PAGE = 5000
#: SQLite page cache of an import's connection, in KiB. Five indexes on frames: with SQLite's
#: default 2 MiB a large import spends its time re-reading index pages; 16 MiB measured as fast as
#: 64 MiB (which was a third of a 1M-frame import's peak memory, held to the end).
IMPORT_SQLITE_CACHE_KIB = 16 * 1024
#: Frames an import into SQLite writes with every index of ``frame_rows`` kept up to date; past
#: it (and past the rows the table held before, which a rebuild reads again) the secondary
#: indexes are dropped inside the import's transaction and built once, sorted, before it commits
#: (a quarter of the insert time at 1M frames). Small imports never change the schema.
IMPORT_DEFER_INDEXES = 20_000
#: Method name → code entries an import caches; past it the cache starts over (a file whose every
#: frame has its own method costs a lookup per page, not memory per method).
IMPORT_METHOD_CACHE = 10_000
#: Bytes of pickled frame rows the pipe from an import's reader process to its writer holds
#: (``recording/import_reader.py``; Linux sets it, elsewhere the system's default, smaller). The
#: reader sends a page (``IMPORT_PAGE`` rows) at a time and waits while the pipe is full: it runs
#: at most a page and a pipe ahead of the writer, whatever the file's size.
IMPORT_PIPE_BYTES = 1 << 20
#: Frame shapes (direction, channel, kind, method) whose decoded names (``store.stream.Shapes``)
#: or printed pieces (``render.FrameRenderer``) one reader keeps, and that frames held in memory
#: are numbered by (``store.stream.RowShapes``, checked before each page of rows); past it the
#: table starts over (a session whose every frame has its own method costs building them again,
#: not memory).
SHAPE_CACHE = 4096

#: Seconds whose printed clock (``HH:MM:SS``) ``show`` keeps (``render._clock_base``): a
#: session's frames come in time order, so a few are in use at once; past it the cache starts
#: over (a session spanning more seconds than this formats each second again, no more memory).
CLOCK_CACHE = 4096

#: Frame sizes whose printed text (`` (1.2 KiB)``) ``show`` keeps: most frames of a session
#: share a few hundred sizes; past it the cache starts over (a peer's sizes are its own, so
#: they are never trusted to be few).
SIZE_TEXT_CACHE = 65536
#: The latest time an imported recording may give (seconds since the epoch; 9999-12-31): the
#: dashboard, ``sessions`` and ``show`` turn times into dates, which end there.
IMPORT_TIME_MAX = 253_402_300_799.0
#: The largest ``seq`` of an imported frame (the ``frame_rows.seq`` and ``annotations.frame_seq``
#: columns are 32-bit integers).
IMPORT_SEQ_MAX = 2**31 - 1
#: Characters of JSON one compared value (a replay's changed result) takes in a JUnit failure's
#: text: a CI report says what changed, it is no copy of the recording.
JUNIT_VALUE_MAX = 2000

# --- The dashboard ---

#: Rendering a huge frame as a tree would make a multi-megabyte page; beyond this size the detail
#: view shows the head of the text and offers the raw bytes as a download.
TREE_LIMIT = 256 * 1024
#: Bytes of a frame's text shown on its page before the rest is offered as a download.
TEXT_LIMIT = 512 * 1024
#: Levels of nesting the tree unfolds; deeper values are left to the raw text below it. A frame
#: nested 1,200 levels deep is recordable, and neither Python's recursion limit nor a browser
#: laying out 1,200 nested ``<details>`` should decide whether its page answers.
TREE_DEPTH = 64
#: Sessions up to this many frames are analysed whole when a page needs it (≈ 0.2 s).
INLINE_LIMIT = 20_000
#: Analyses the dashboard keeps (LRU), one per session and revision.
ANALYSIS_CACHE = 32
#: Sessions the dashboard keeps a "being analysed whole" lock for (LRU): pages asking for the
#: same session wait for one analysis instead of running two; a dropped lock costs at most one
#: duplicate analysis, never a wrong one.
ANALYSIS_LOCKS = 64
#: Bounded analysis passes the dashboard runs at once (stale findings, "Analyse now"): a pass
#: is CPU work in a worker thread, and the pages' small reads run in the same thread pool (a
#: few threads on a small machine), so six clicks on a big session must not take them all.
ANALYSES_AT_ONCE = 1
#: Frames read around one request on a session too big to analyse whole.
SPAN_LIMIT = 5000
#: Ticks (progress, log and other notifications of one exchange, e.g. each SSE event) a
#: waterfall bar shows: a task that reported progress 100,000 times is one bar, not a page of
#: 100,000 marks; the bar says how many it left out.
WATERFALL_TICKS = 50
#: Sessions (lanes' bars) on one host timeline: a host runs ten servers, a busy hour a few dozen
#: sessions; past it the page says how many it left out and a narrower window shows them.
HOST_SESSIONS = 60
#: Requests drawn per session on the host timeline (its first in the window); the rest are
#: counted, and the session's own waterfall shows them all.
HOST_REQUESTS = 300
#: The largest ``tools/list`` answer the session page parses for its per-tool context cost (a
#: larger one is costed whole, from its size, without the per-tool table).
COST_PARSE_LIMIT = 4 * 1024 * 1024
#: Bytes of a frame a Copy button carries on the page (its JSON, its bytes, a curl command, a
#: JSON Lines snippet): a larger frame is not put on the page twice; its download stays.
COPY_LIMIT = 512 * 1024
#: Exchanges on one waterfall page (``limit=``), as the timeline's page limit.
WATERFALL_PAGE = 1000
#: Notifications read for one waterfall page of a session too big to analyse whole (to put
#: their ticks on the page's bars): a page's requests between them rarely carry more; past it
#: the later bars lack ticks and the page says so.
WATERFALL_NOTES = 2000
#: Bytes of one such notification read with it (progress and log notifications are small); a
#: larger one is no tick on such a page. With WATERFALL_NOTES, at most 16 MiB a page.
WATERFALL_NOTE_BYTES = 8 * 1024

# --- CLI and faults ---

#: The most seconds a time flag takes (``--connect-timeout``, ``--idle-cut``, ``mock --timeout``,
#: ``replay --timeout`` …): a week. Longer is a slip (milliseconds typed as seconds, an exponent)
#: that would look like a hang; "wait for ever" is the flags' own 0 where they have one.
MAX_FLAG_SECONDS = 7 * 24 * 3600.0
#: The largest ``nth=``/``times=`` a fault rule takes: a billion frames, more than any session
#: records. A larger count could never fire, so it is a typo (``nth=10000000000000000000000000``),
#: refused with one line rather than accepted silently.
MAX_FAULT_COUNT = 1_000_000_000

# --- Test servers (``mcp_proxy.testing``) ---

#: Tasks one task-preset test server keeps (``tasks``, ``tasks-failed`` …): a client creating
#: tasks without end must not grow the server without end. Past it the oldest task is dropped
#: (its runner cancelled) and a poll for it is answered "unknown task" (-32602).
TEST_SERVER_TASKS = 256

# --- Intercept (docs/intercept.md) ---

#: Seconds between two looks at the store while a message is held: a person's decision reaches
#: the wire within this (a poll of one indexed row; the relay waits no longer in one go, so a
#: relay that ends or a timeout is seen in time).
INTERCEPT_POLL = 0.1
#: ``--intercept-timeout``'s default: a held message nobody resolves is forwarded unchanged after
#: five minutes (the host's own request timeout is usually longer; 0 waits for ever).
INTERCEPT_TIMEOUT = 300.0
#: The largest message that is held (and stored whole for a person to read and edit); a larger
#: one is forwarded unchanged at once, with a line on stderr and an ``inject.intercept`` finding
#: saying it was too large to hold. Also the largest edited message or answer ``intercept
#: resolve`` takes.
INTERCEPT_MAX_BYTES = 4 * 1024 * 1024
#: Held messages ``intercept list`` and the store read show at once (the oldest first); a relay
#: holds at most one per direction and stream, so more are left by relays that are gone.
INTERCEPT_LIST_MAX = 1000

# --- Host connections (both front ends: the reverse relay, the lean forward engine) ---

#: Host connections one listener serves at once (``relay/http/front.py`` ``FrontServer``): each
#: costs a file descriptor, its parser and buffers, and in the relay one pooled upstream
#: connection more — 512 stays under the 1,024 descriptors many systems give a process by
#: default, and well above what hosts open (an IDE: a few; the benchmark's load test: 200 in
#: flight). Past it a new connection gets ``503`` with ``Connection: close`` and ``Retry-After``
#: (an answer the host can show, not a reset that looks like a crash), is counted, and stderr
#: says so. ``MCPTAPE_MAX_HOST_CONNECTIONS`` overrides it at start-up (tests).
MAX_HOST_CONNECTIONS = 512
#: Seconds a refused connection stays open after its ``503`` went, so that the host reads the
#: answer instead of a reset (closing with its request unread would send RST): it closes at
#: once when the host's bytes arrive (they are dropped), at the latest after this.
REFUSED_LINGER = 2.0
#: At most one stderr line per this many seconds about connections refused at
#: ``MAX_HOST_CONNECTIONS`` (the first at once): a flood of refusals is one line a minute with
#: the running count, not a line per connection.
REFUSED_REPORT_EVERY = 60.0
