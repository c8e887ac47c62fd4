"""Rules the test suite keeps about itself (issues #22 and #25)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.dashboard import browser


def test_a_missing_chromium_skips_locally_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(browser.CHROMIUM_ENV, f"{tmp_path}/no-chromium-here")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        browser.require_chromium()
    reason = str(skipped.value)
    assert "no-chromium-here" in reason and "apt-get install chromium" in reason
    assert "\n" not in reason


def test_a_missing_chromium_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(browser.CHROMIUM_ENV, f"{tmp_path}/no-chromium-here")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        browser.require_chromium()


TESTS = Path(__file__).resolve().parent
LITERAL_SLEEP = re.compile(r"sleep\(\s*(\d*\.?\d+)\s*\)")
#: The shortest sleep the rule calls long. A test that needs time to pass (a token that must
#: expire, a relay that must outlive its traffic) waits for that condition, with a short
#: lifetime; a child that must live until killed blocks (``signal.pause()``).
LONG_SLEEP = 0.5


def long_sleeps() -> list[tuple[str, int, str]]:
    """Every ``sleep(<literal ≥ LONG_SLEEP>)`` under tests/: (file, line, text)."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            for m in LITERAL_SLEEP.finditer(line):
                if float(m.group(1)) >= LONG_SLEEP:
                    found.append((path.relative_to(TESTS).as_posix(), n + 1, line.strip()))
    return found


def test_no_long_sleep_is_used_as_synchronisation() -> None:
    """A test waits for the condition (``tests.helpers.db.wait_until``, ``watch.until``,
    ``StreamWatch.wait_for``), never for a guess at how long it takes: no long sleep at all."""
    found = long_sleeps()
    assert not found, "\n".join(f"{f}:{n}: {text}" for f, n, text in found)


def test_the_sleep_rule_sees_a_long_sleep() -> None:
    def literal(text: str) -> str | None:
        m = LITERAL_SLEEP.search(text)
        return m.group(1) if m else None

    sleep = "sleep("  # written apart, so that this file has no long sleep of its own
    assert literal(f"    time.{sleep}2.5)  # wait for it") == "2.5"
    assert literal(f"await asyncio.{sleep}.5)") == ".5"
    assert literal(f"time.{sleep}delay)") is None


@pytest.mark.parametrize(("value", "workers"), [("0", 0), ("2", 2), (" 3 ", 3)])
def test_the_worker_count_comes_from_the_environment(value: str, workers: int) -> None:
    from tests.conftest import workers_from_env

    assert workers_from_env(value) == workers


@pytest.mark.parametrize("value", ["three", "-1", "2.5"])
def test_a_bad_worker_count_is_one_usage_line(value: str) -> None:
    """``MCPTAPE_TEST_WORKERS=three`` was a ValueError traceback before the run started."""
    from tests.conftest import WORKERS_ENV, workers_from_env

    with pytest.raises(pytest.UsageError) as bad:
        workers_from_env(value)
    assert str(bad.value) == f"{WORKERS_ENV}={value!r}: a number of workers (0: serial)"
