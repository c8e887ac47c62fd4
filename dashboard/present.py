"""Turning recorded bytes into HTML that cannot run, spoof or break the page.

Everything a server or host sent is hostile until proven otherwise. Jinja's autoescape covers
``<``, ``>``, ``&`` and quotes; this module adds what escaping alone does not: control and
bidirectional-override characters (which can reorder what a reader sees, e.g. make
``exe.txt`` look like ``txt.exe``) are shown as visible ``U+XXXX`` badges, and recorded text is
never turned into a link, so a ``javascript:`` URL stays text. Pure functions: the views call
them, the templates only place their output.
"""

from __future__ import annotations

import base64
import json
import math
import signal
import unicodedata
from collections.abc import Iterable
from typing import Any

from markupsafe import Markup, escape

from mcp_proxy.frames import strip_line_end, text_or_none
from mcp_proxy.headers import decode_header_value as _decode_header_value
from mcp_proxy.limits import TEXT_LIMIT, TREE_DEPTH, TREE_LIMIT
from mcp_proxy.protocol import ERA_INITIALIZE, ERA_MODERN
from mcp_proxy.render import human_size, parse_json_safely
from mcp_proxy.store.rows import ViewFrame

#: Characters that must never reach the page as themselves: C0/C1 controls (except tab and
#: newline, which <pre> shows faithfully), bidi embeddings/overrides/isolates and marks, and the
#: invisible joiners and separators that make two different strings look the same.
_INVISIBLE = frozenset(
    [
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        0x0D,
        *range(0x0E, 0x20),
        *range(0x7F, 0xA0),
        *(0x061C, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029),
        *range(0x202A, 0x202F),
        *range(0x2060, 0x2070),
        0xFEFF,
        *range(0xFFF9, 0xFFFC),
    ]
)


def vis(text: Any) -> Markup:
    """Escape ``text`` for HTML and show every invisible or direction-changing character."""
    s = "" if text is None else str(text)
    if not any(ord(ch) in _INVISIBLE for ch in s):
        return escape(s)
    parts: list[str] = []
    for ch in s:
        cp = ord(ch)
        if cp in _INVISIBLE:
            name = unicodedata.name(ch, "control character")
            parts.append(f'<span class="ctl" title="{escape(name)}">U+{cp:04X}</span>')
        else:
            parts.append(str(escape(ch)))
    return Markup("".join(parts))


def charrefs(text: Any) -> Markup:
    """Escape ``text`` for a ``<template>`` a Copy button reads: every invisible or
    direction-changing character as a numeric reference, so none reaches the page source as
    itself, while the parsed text (what is copied) is the exact original. (HTML maps the C1
    references ``&#x80;``–``&#x9F;`` to windows-1252 characters: those few copy differently.)"""
    s = str(escape("" if text is None else str(text)))
    if not any(ord(ch) in _INVISIBLE for ch in s):
        return Markup(s)
    return Markup("".join(f"&#x{ord(ch):X};" if ord(ch) in _INVISIBLE else ch for ch in s))


def plain(text: Any) -> str:
    """Like :func:`vis` but as plain text (for SVG labels and attributes, where no markup fits)."""
    s = "" if text is None else str(text)
    return "".join(f"U+{ord(ch):04X}" if ord(ch) in _INVISIBLE else ch for ch in s)


def has_invisible(text: str) -> bool:
    return any(ord(ch) in _INVISIBLE for ch in text)


# ---------------------------------------------------------------------------------- JSON tree


def json_tree(value: Any, *, open_depth: int = 3) -> Markup:
    """A pretty, collapsible rendering of parsed JSON: ``<details>`` per object and array.

    No JavaScript needed to fold; keys and strings go through :func:`vis`.
    """
    out: list[str] = []
    _tree(value, out, 0, open_depth)
    return Markup('<div class="json">' + "".join(out) + "</div>")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return f'<span class="s">{vis(json.dumps(value, ensure_ascii=False))}</span>'
    if value is None:
        return '<span class="l">null</span>'
    if isinstance(value, bool):
        return f'<span class="l">{"true" if value else "false"}</span>'
    return f'<span class="n">{escape(json.dumps(value))}</span>'


def _tree(value: Any, out: list[str], depth: int, open_depth: int, trailing: str = "") -> None:
    """Append ``value``'s HTML; ``trailing`` (a comma) goes inside the fold so it stays put."""
    if isinstance(value, dict):
        items: Iterable[tuple[str | None, Any]] = value.items()
        opener, closer, n = "{", "}", len(value)
    elif isinstance(value, list):
        items = ((None, v) for v in value)
        opener, closer, n = "[", "]", len(value)
    else:
        out.append(_scalar(value) + trailing)
        return
    if n == 0:
        out.append(opener + closer + trailing)
        return
    if depth >= TREE_DEPTH:
        title = f"nested deeper than {TREE_DEPTH} levels: see the raw bytes below"
        out.append(f'<span class="muted" title="{title}">{opener} … {closer}</span>{trailing}')
        return
    summary = f"{opener} {n} {'key' if opener == '{' else 'item'}{'s' if n != 1 else ''} {closer}"
    attr = " open" if depth < open_depth else ""
    out.append(f'<details{attr}><summary data-closed="{escape(summary)}">{opener}</summary>')
    out.append('<div class="kids">')
    for i, (key, child) in enumerate(items):
        out.append('<div class="kv">')
        if key is not None:
            out.append(f'<span class="k">{vis(json.dumps(key, ensure_ascii=False))}</span>: ')
        _tree(child, out, depth + 1, open_depth, "," if i < n - 1 else "")
        out.append("</div>")
    out.append(f"</div>{closer}{trailing}</details>")


# ---------------------------------------------------------------------------------- frames


def frame_body(f: ViewFrame) -> dict[str, Any]:
    """What a frame detail shows: the parsed JSON tree, the text, or base64 for binary."""
    raw: bytes = f.get("raw") or b""
    content = strip_line_end(raw)
    # Every key the template reads is always present (it renders under StrictUndefined).
    out: dict[str, Any] = {
        "size": len(raw),
        "size_h": human_size(len(raw)),
        "invisible": False,
        "truncated": False,
    }
    msg = parse_json_safely(raw) if f["kind"] not in ("noise", "stderr", "empty") else None
    if msg is not None and len(raw) <= TREE_LIMIT:
        out["tree"] = json_tree(msg)
    text = text_or_none(content[:TEXT_LIMIT] if len(content) > TEXT_LIMIT else content)
    if text is None and len(content) > TEXT_LIMIT:
        text = content[:TEXT_LIMIT].decode("utf-8", "ignore")
    if text is not None:
        out["text"] = text
        out["invisible"] = has_invisible(text)
    else:
        out["base64"] = base64.b64encode(content[:TEXT_LIMIT]).decode("ascii")
        out["note"] = "not valid UTF-8: shown as base64"
    out["truncated"] = len(content) > TEXT_LIMIT
    return out


def preview(head: bytes | None, kind: str, width: int = 160) -> str:
    """A one-line summary of a frame from its first bytes (all a timeline row fetches).

    For JSON-RPC it is the interesting part — params or result — rather than the envelope.
    """
    raw = head or b""
    text = strip_line_end(raw).decode("utf-8", "replace")
    if kind not in ("stderr", "noise"):
        for marker in ('"params":', '"result":', '"error":'):
            pos = text.find(marker)
            if pos >= 0:
                text = text[pos + len(marker) :]
                break
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------------------- headers


def decode_header_value(value: str) -> str | None:
    """The decoded text of a ``=?base64?…?=`` header value, or None when it is plain."""
    try:
        decoded = _decode_header_value(value)
    except Exception:  # a malformed sentinel is shown as sent
        return None
    return decoded if decoded != value else None


def header_rows(headers: Any) -> list[dict[str, Any]]:
    """Headers in wire order with Mcp-* marked and sentinel values decoded."""
    rows: list[dict[str, Any]] = []
    for item in headers or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            name, value = str(item[0]), str(item[1])
        else:
            continue
        lname = name.lower()
        rows.append(
            {
                "name": name,
                "value": value,
                "decoded": decode_header_value(value),
                "mcp": lname.startswith("mcp-") or lname == "last-event-id",
            }
        )
    return rows


# ---------------------------------------------------------------------------------- JSON twins


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """JSON for the ``.json`` twins: bytes as base64, NaN as null, non-ASCII kept."""
    return json.dumps(_finite(data), default=_default, ensure_ascii=False)


# ---------------------------------------------------------------------------------- numbers


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    v = seconds * 1000
    if v < 1:
        return f"{v:.2f} ms"
    if v < 100:
        return f"{v:.1f} ms"
    if v < 10_000:
        return f"{v:.0f} ms"
    return f"{seconds:.1f} s"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def latency_svg(rows: list[dict[str, Any]], *, width: int = 720) -> dict[str, Any]:
    """Geometry for the server-rendered latency chart: one box-and-whisker row per method.

    ``rows`` are :meth:`mcp_proxy.analysis.stats.MethodStats.as_dict` results (milliseconds).
    A log scale from 0.1 ms to the slowest answer, because MCP latencies span five orders of
    magnitude (a cached list vs a tool that calls an LLM). The template draws the shapes.
    """
    rows = [r for r in rows if r["latency_ms"]["n"]]
    label_w, pad, row_h = 200, 12, 26
    plot_w = width - label_w - pad * 2
    lo = 0.1
    hi = max([r["latency_ms"]["max"] for r in rows] + [10.0]) * 1.5
    span = math.log10(hi) - math.log10(lo)

    def x(v: float | None) -> float:
        v = min(max(v or lo, lo), hi)
        return round(label_w + pad + (math.log10(v) - math.log10(lo)) / span * plot_w, 1)

    ticks = []
    t = lo
    while t <= hi:
        ticks.append({"x": x(t), "label": f"{t:g} ms" if t < 1000 else f"{t / 1000:g} s"})
        t *= 10
    shapes = []
    for i, r in enumerate(rows):
        lat = r["latency_ms"]
        y = 20 + i * row_h
        label = ("← " if r["direction"] == "s2c" else "") + r["method"]
        shapes.append(
            {
                "y": y,
                "mid": y + row_h / 2 - 4,
                "label": label,
                "min": x(lat.get("min")),
                "p50": x(lat["p50"]),
                "p95": x(lat["p95"]),
                "p99": x(lat["p99"]),
                "max": x(lat["max"]),
                "title": (
                    f"{label}: n={lat['n']} p50 {ms_value(lat['p50'])} p95 {ms_value(lat['p95'])}"
                    f" p99 {ms_value(lat['p99'])} max {ms_value(lat['max'])}"
                ),
            }
        )
    return {
        "width": width,
        "height": 30 + len(rows) * row_h + 20,
        "ticks": ticks,
        "rows": shapes,
        "axis_y": 24 + len(rows) * row_h,
        "left": label_w + pad,
        "right": width - pad,
    }


#: What an era is called on a page: both eras named the same way (by how a session opens),
#: the value the filters and the ``.json`` twins use kept in the title.
ERA_LABELS = {
    ERA_INITIALIZE: ("initialize handshake", "initialize era: the session opens with initialize"),
    ERA_MODERN: ("stateless", "2026-07-28 era: no initialize, each request carries its version"),
}


def era_label(era: str | None) -> str:
    """The era as a word for a column (``initialize`` and ``2026-07-28`` read alike)."""
    if not era:
        return ""
    return ERA_LABELS.get(era, (f"era {era}", ""))[0]


def era_title(era: str | None) -> str:
    if not era:
        return ""
    return ERA_LABELS.get(era, ("", f"era {era}"))[1]


def exit_text(code: int | None, sig: int | None) -> str:
    """How a server process ended: ``exit 1``, ``killed by SIGKILL (9)``, or both when a
    wrapper reported a code and a signal; empty when neither is known."""
    parts: list[str] = []
    if code is not None:
        parts.append(f"exit {code}")
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal"
        parts.append(f"killed by {name} ({sig})")
    return ", ".join(parts)


def ms_value(milliseconds: float | None) -> str:
    """Milliseconds (as the analysis reports latency) for people."""
    return ms(milliseconds / 1000 if milliseconds is not None else None)
