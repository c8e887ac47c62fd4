"""The sessions whose ``show -x`` output is pinned in ``tests/browse_data/show_x.json``: every
catalogue case (trigger and near miss) and every recording in ``recordings/``.

The expectations were written by the full analysis (``session_analysis``) before ``show -x``
streamed (issue 24); ``python -m tests.show_x_sessions`` rewrites them from the current code
(only when an intended change of the output is reviewed)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from mcp_proxy.recording import read_recording
from mcp_proxy.recording.database import import_recording
from mcp_proxy.store.engine import ensure_schema
from tests.analysis.cases import CASES
from tests.helpers.cli import run_mcptape

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"
EXPECTED = Path(__file__).resolve().parent / "browse_data" / "show_x.json"


#: Catalogue cases left out of the pinning: sessions of tens of thousands of frames (past a
#: bound of the analysis, e.g. task.untracked: MAX_TASKS_TRACKED tasks) whose ``show -x`` would
#: add megabytes to the expectations and seconds to every run; their pairing is every case's.
BIG_CASES = frozenset({"task.untracked"})
#: The keys of the catalogue's sessions (trigger and near miss of every other code).
CATALOGUE_KEYS = frozenset(
    f"{code}-{which}" for code in CASES if code not in BIG_CASES for which in (0, 1)
)


def record_all(db: Path) -> dict[str, str]:
    """Every pinned session recorded into ``db``: its key in the expectations -> its id."""
    url = "sqlite:///" + str(db)
    ensure_schema(url)
    sids: dict[str, str] = {}
    for code in sorted(set(CASES) - BIG_CASES):
        for which in (0, 1):
            sids[f"{code}-{which}"] = CASES[code][which]().record(url, name=f"{code}-{which}")
    for path in sorted(RECORDINGS.glob("*.jsonl")):
        result = import_recording(read_recording(path), url)
        for i, (_old, new) in enumerate(result.sessions):
            sids[f"{path.name}-{i}"] = new
    return sids


def show_x(db: Path, sid: str) -> dict[str, str]:
    """``show SID -x`` as text (exchanges only: no head, no findings) and as JSON."""
    text = run_mcptape("show", sid, "-x", "--no-findings", "--db", str(db))
    js = run_mcptape("show", sid, "-x", "--format", "json", "--db", str(db))
    assert text.returncode == 0 and js.returncode == 0, (text.stderr, js.stderr)
    body = text.stdout.split("\n\n", 1)[1]  # (the head: the session's id and start time)
    return {"text": body, "json": js.stdout, "stderr": text.stderr + js.stderr}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "pinned.db"
        sids = record_all(db)
        out = {key: show_x(db, sid) for key, sid in sids.items()}
    EXPECTED.write_text(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(out)} sessions -> {EXPECTED}", file=sys.stderr)


if __name__ == "__main__":
    main()
