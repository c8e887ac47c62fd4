"""Trigger and near miss of each task and extension finding (registered into ``CASES``)."""

from __future__ import annotations

from mcp_proxy.testing.factories import SERVER_CAPS, Wire
from tests.analysis.cases import case
from tests.analysis.task_wires import DONE, legacy, modern, task_fields


@case("tool.task_failed")
def _(t: bool) -> Wire:
    return modern(["working", "failed" if t else "completed"])


@case("task.unfinished")
def _(t: bool) -> Wire:
    return legacy(["working"] if t else ["working", "completed"])


@case("task.unknown_id")
def _(t: bool) -> Wire:
    return legacy(["working"], get_id="t-forged" if t else "t-1", notify="completed")


@case("task.not_advertised")
def _(t: bool) -> Wire:
    return legacy(["completed"], caps=SERVER_CAPS if t else None)


@case("task.poll_too_fast")
def _(t: bool) -> Wire:
    return legacy(["working"] * 4 + ["completed"], poll_ms=10 if t else 100)


@case("task.status_after_terminal")
def _(t: bool) -> Wire:
    return legacy(["completed", "working" if t else "completed"])


@case("extension.undeclared")
def _(t: bool) -> Wire:
    return modern(["completed"], server_caps=SERVER_CAPS if t else None)


@case("task.untracked")
def _(t: bool) -> Wire:
    """One more task open at once than the pairing follows (the near miss: exactly as many)."""
    from mcp_proxy.limits import MAX_TASKS_TRACKED

    w = legacy([])
    for i in range(MAX_TASKS_TRACKED + (0 if t else -1)):
        w.request("tools/call", f"c{i}", {"name": "research", "arguments": {}, "task": {}})
        w.result(f"c{i}", {"task": task_fields("completed", f"x{i}")})
    w.request("tasks/result", "r", {"taskId": "t-1"})
    w.result("r", DONE)
    return w.end()


SKILL_URI = "skill://git-workflow/SKILL.md"
SKILL_MD = "---\nname: git-workflow\ndescription: Follow the team's Git conventions\n---\n\n# Git\n"


def skill_session(served: str | bytes, *, method: str = "skills/list") -> Wire:
    """2026-07-28: a skill entry (``skills/list`` or ``skills/get``) listing SKILL_MD's digest
    and size, then a ``resources/read`` of it serving ``served`` (bytes: as a blob)."""
    import base64
    import hashlib

    from mcp_proxy.analysis.skills import SKILLS_EXTENSION
    from mcp_proxy.testing.factories import envelope

    raw = SKILL_MD.encode()
    entry = {
        "uri": SKILL_URI,
        "frontmatter": {"name": "git-workflow", "description": "Follow the team's Git conventions"},
        "resources": [
            {
                "uri": SKILL_URI,
                "digest": "sha256:" + hashlib.sha256(raw).hexdigest(),
                "size": len(raw),
            }
        ],
    }
    cache = {"resultType": "complete", "ttlMs": 300000, "cacheScope": "public"}
    w = Wire.modern(server_caps={**SERVER_CAPS, "extensions": {SKILLS_EXTENSION: {}}})
    if method == "skills/list":
        w.request("skills/list", 2, {"_meta": envelope()})
        w.result(2, {**cache, "skills": [entry]})
    else:
        w.request("skills/get", 2, {"uri": SKILL_URI, "_meta": envelope()})
        w.result(2, {**cache, "skill": entry})
    w.request("resources/read", 3, {"uri": SKILL_URI, "_meta": envelope()})
    content: dict[str, str] = {"uri": SKILL_URI, "mimeType": "text/markdown"}
    if isinstance(served, bytes):
        content["blob"] = base64.b64encode(served).decode()
    else:
        content["text"] = served
    w.result(3, {**cache, "contents": [content]})
    return w.end()


@case("skill.digest_mismatch")
def _(t: bool) -> Wire:
    return skill_session(SKILL_MD.replace("Git\n", "Git, as amended\n") if t else SKILL_MD)
