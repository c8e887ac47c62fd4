"""What legitimately differs is ignored by default and listed; users add paths in mcptape.toml.

Through the ``mcptape diff`` command line: the header names every ignored thing, the default
ones included; ``mcptape.toml`` beside a recording adds paths for every recording of its
directory or for one file; a bad file is one line and exit 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.travel.conftest import RECORDINGS, run_cli

BASIC = RECORDINGS / "basic-legacy.mcptape.jsonl"


def _changed_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The recording, and a copy whose echo answer differs (as a server with a clock would)."""
    a = tmp_path / "a.mcptape.jsonl"
    b = tmp_path / "b.mcptape.jsonl"
    shutil.copy(BASIC, a)
    old = '\\"text\\":\\"hello, wire\\",\\"type\\"'
    b.write_text(BASIC.read_text().replace(old, old.replace("hello, wire", "bye"), 1))
    assert a.read_text() != b.read_text()
    return a, b


def test_the_header_lists_what_is_ignored_by_default(tmp_path: Path) -> None:
    out = run_cli("diff", str(BASIC), str(BASIC))
    assert out.returncode == 0
    header = next(line for line in out.stdout.splitlines() if line.startswith("ignored: "))
    for thing in ("request ids", "timestamps", "session ids", "$.._meta", "$..progressToken"):
        assert thing in header
    assert "opaque: $..requestState" in header
    report = json.loads(run_cli("diff", str(BASIC), str(BASIC), "--format", "json").stdout)
    assert report["never_compared"] == ["request ids", "timestamps", "session ids", "HTTP headers"]
    assert report["masked"] == ["$..requestState"]


def test_mcptape_toml_beside_the_recording_adds_ignore_paths(tmp_path: Path) -> None:
    a, b = _changed_copy(tmp_path)
    differs = run_cli("diff", str(a), str(b))
    assert differs.returncode == 1 and "$.result.content[0].text" in differs.stdout

    config = tmp_path / "mcptape.toml"
    config.write_text('[diff."b.mcptape.jsonl"]\nignore = ["$.result.content[0].text"]\n')
    same = run_cli("diff", str(a), str(b))
    assert same.returncode == 0, same.stdout
    assert "$.result.content[0].text" in same.stdout.splitlines()[2]  # named in the header

    config.write_text('[diff."other.jsonl"]\nignore = ["$.result.content[0].text"]\n')
    assert run_cli("diff", str(a), str(b)).returncode == 1  # for another file only

    config.write_text('[diff]\nignore = ["$..text"]\n')  # every recording of the directory
    assert run_cli("diff", str(a), str(b)).returncode == 0


def test_a_bad_mcptape_toml_is_one_line(tmp_path: Path) -> None:
    a, b = _changed_copy(tmp_path)
    config = tmp_path / "mcptape.toml"
    config.write_text('[diff]\nignore = ["params.x"]\n')
    out = run_cli("diff", str(a), str(b))
    assert out.returncode == 2
    assert out.stderr == f"mcptape: {config}: JSONPath 'params.x' must start with '$'\n"
    config.write_text("[diff\n")
    out = run_cli("diff", str(a), str(b))
    assert out.returncode == 2 and out.stderr.startswith(f"mcptape: {config}: cannot read it:")
    assert out.stderr.count("\n") == 1
