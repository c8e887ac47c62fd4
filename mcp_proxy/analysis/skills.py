"""Skills (the 2026-07-28 extension ``io.modelcontextprotocol/skills``, SEP-2640): what a
skill's entry says of its files against what ``resources/read`` served.

A ``skills/list`` or ``skills/get`` entry lists every file of a skill with the SHA-256 digest
(``sha256:{hex}``) and size of its raw bytes; a host must verify each file it reads against
them. The recording holds both the entries and the served files, so a file whose bytes (a
text content's UTF-8, a blob's base64-decoded bytes) do not match its entry is a finding,
``skill.digest_mismatch``. At most :data:`~mcp_proxy.limits.SKILL_FILES_KEPT` listed files are
remembered (the oldest forgotten first), and only those whose URI has at most
:data:`~mcp_proxy.limits.SKILL_URI_CHARS` characters; an answer not parsed (cut short, too big)
is not compared.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import OrderedDict
from typing import Any, NamedTuple

from mcp_proxy.analysis.model import Exchange, FindingSink, Msg
from mcp_proxy.bounded import remember
from mcp_proxy.limits import SKILL_FILES_KEPT, SKILL_URI_CHARS

#: The skills extension's identifier.
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
#: Characters of a URI quoted in a finding's title.
_URI_SHOWN = 200


class _Listed(NamedTuple):
    digest: str
    size: int
    seq: int  # the answer that listed it


def _entries(method: str, result: dict[str, Any]) -> list[Any]:
    if method == "skills/list":
        skills = result.get("skills")
        return skills if isinstance(skills, list) else []
    return [result.get("skill")]


def _served(result: dict[str, Any], uri: str) -> bytes | None:
    """The raw bytes a ``resources/read`` answer served for ``uri`` (None: none to compare)."""
    contents = result.get("contents")
    if not isinstance(contents, list):
        return None
    for item in contents:
        if not isinstance(item, dict) or item.get("uri", uri) != uri:
            continue
        if isinstance(item.get("text"), str):
            return str(item["text"]).encode("utf-8", "surrogatepass")
        if isinstance(item.get("blob"), str):
            try:
                return base64.b64decode(item["blob"], validate=True)
            except (binascii.Error, ValueError):
                return None
    return None


class Skills:
    """Skill entries' digests and sizes, and the reads of the files they list."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self.listed: OrderedDict[str, _Listed] = OrderedDict()
        #: URIs already reported (once each), bounded as ``listed`` is
        self.reported: OrderedDict[str, None] = OrderedDict()

    def reads_messages(self) -> bool:
        return False

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Msg) -> None:
        pass

    def finish(self) -> None:
        pass

    def exchange(self, ex: Exchange) -> None:
        if ex.direction != "c2s" or ex.request is None or ex.response is None:
            return
        if ex.method not in ("skills/list", "skills/get", "resources/read"):
            return
        resp = ex.response
        result = resp.result if resp.kind == "response" else None
        if not isinstance(result, dict):
            return
        if ex.method == "resources/read":
            self._read(ex, resp, result)
            return
        for entry in _entries(ex.method, result):
            files = entry.get("resources") if isinstance(entry, dict) else None
            for f in files if isinstance(files, list) else ():
                self.remember(f, resp.seq)

    def remember(self, f: Any, seq: int) -> None:
        """Follow one listed file (a SkillResource) of the entry answered in frame ``seq``."""
        if not isinstance(f, dict) or not isinstance(f.get("uri"), str):
            return
        if len(f["uri"]) > SKILL_URI_CHARS:
            return  # (not followed: the kept URIs stay small)
        digest = _DIGEST.fullmatch(f["digest"]) if isinstance(f.get("digest"), str) else None
        size = f.get("size")
        if digest is None or not isinstance(size, int) or isinstance(size, bool):
            return  # (a malformed entry: a host must not load it; nothing to compare with)
        uri: str = f["uri"]
        self.listed.pop(uri, None)  # (listed again: now the newest)
        remember(self.listed, uri, _Listed(digest.group(1), size, seq), SKILL_FILES_KEPT)

    def _read(self, ex: Exchange, resp: Msg, result: dict[str, Any]) -> None:
        uri = ex.request.params.get("uri") if ex.request is not None else None
        listed = self.listed.get(uri) if isinstance(uri, str) else None
        if listed is None or uri in self.reported:
            return
        assert isinstance(uri, str)
        served = _served(result, uri)
        if served is None:
            return
        digest = hashlib.sha256(served).hexdigest()
        if digest == listed.digest and len(served) == listed.size:
            return
        remember(self.reported, uri, None, SKILL_FILES_KEPT)
        what = (
            f"{len(served)} bytes, its entry says {listed.size}"
            if len(served) != listed.size
            else f"sha256:{digest[:12]}…, its entry says sha256:{listed.digest[:12]}…"
        )
        self.sink.add(
            "skill.digest_mismatch",
            f"skill file {uri[:_URI_SHOWN]} served {what}",
            f"The skill entry (frame #{listed.seq}) lists this file with digest"
            f" sha256:{listed.digest} and size {listed.size}; resources/read served"
            f" {len(served)} bytes with digest sha256:{digest}. A host must not use content"
            " that does not match its entry (corrupted, tampered with, or the skill changed"
            " after it was listed).",
            [listed.seq, ex.request_seq, resp.seq],
            exchange=ex.index,
        )
