"""Rules the test suite keeps about itself (issues #22 and #25)."""

from __future__ import annotations

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
