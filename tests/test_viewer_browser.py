"""The episode viewer in a real browser: Voila serves tests/browser/viewer_demo.ipynb on localhost, a headless
Chromium (Debian's ``chromium`` package, driven by Playwright; no browser download) picks another episode and another
turn, and the page must show another observation and action. Saves figures/06_viewer_in_browser.png.

Skipped, saying what is missing, without /usr/bin/chromium (``apt-get install chromium``; .ci/run installs it),
playwright or voila (``pip install -e '.[dev]'``). Deselect with ``-m "not browser"``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = PROJECT_ROOT / "tests" / "browser" / "viewer_demo.ipynb"
SCREENSHOT = PROJECT_ROOT / "figures" / "06_viewer_in_browser.png"
CHROMIUM = Path("/usr/bin/chromium")
SERVER_START_S = 60
PAGE_TIMEOUT_MS = 180_000  # Voila runs the notebook before it sends the page: slow on a loaded 2-core CPU

pytestmark = pytest.mark.browser


def _require() -> None:
    """Skip with a message naming what is missing."""
    missing = []
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"the chromium binary {CHROMIUM} (`apt-get install chromium`; .ci/run installs it)")
    packages = []
    for module, package in (("playwright.sync_api", "playwright"), ("voila", "voila")):
        try:
            __import__(module)
        except ImportError:
            packages.append(package)
    if packages:
        missing.append(f"the Python package{'s' * (len(packages) > 1)} {' and '.join(packages)} "
                       "(`.venv/bin/pip install -e '.[dev]'`)")
    if missing:
        pytest.skip("browser test skipped: missing " + "; ".join(missing))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def voila_url(tmp_path_factory):
    """Voila serving the demo notebook on a free localhost port; always shut down (its kernels with it)."""
    _require()
    port = _free_port()
    log_path = tmp_path_factory.mktemp("voila") / "voila.log"
    # the kernelspec `python3` resolves to this interpreter (jupyter_client runs `python` as sys.executable)
    command = [sys.executable, "-m", "voila", str(NOTEBOOK), "--no-browser", "--Voila.ip=127.0.0.1",
               f"--port={port}", "--Voila.port_retries=0", "--show_tracebacks=True"]
    env = {**os.environ, "APO_PROFILE": os.environ.get("APO_PROFILE", "ci")}
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while server.poll() is None and not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if server.poll() is not None or not _answers(port):
            why = f"exited with {server.returncode}" if server.poll() is not None else f"not up in {SERVER_START_S} s"
            pytest.fail(f"voila {why}: {' '.join(command)}\n--- log ---\n{log_path.read_text()}")
        yield f"http://127.0.0.1:{port}/", log_path
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)  # voila stops its loop and shuts its kernels down
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def test_viewer_in_browser(voila_url):
    from playwright.sync_api import Error as PlaywrightError, expect, sync_playwright

    url, log_path = voila_url
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            try:
                page.goto(url, wait_until="domcontentloaded")
                shown = page.locator(".widget-html-content", has_text="Instruction:")
                expect(shown).to_contain_text("Episode #0", timeout=PAGE_TIMEOUT_MS)
            except (AssertionError, PlaywrightError) as e:  # a timeout is a PlaywrightError
                page.screenshot(path=str(log_path.with_suffix(".png")))
                raise AssertionError(f"the viewer did not appear: {e}\n--- voila log ---\n{log_path.read_text()}") from e
            assert f"kernel python: {sys.executable}" in page.content(), "the kernel is not this interpreter"

            def turn_shown() -> tuple[str, str]:
                """The observation and the action of the turn on screen."""
                return shown.locator("div[style*='monospace']").inner_text(), shown.locator("code").inner_text()

            first = turn_shown()
            assert "Turn 1 / " in shown.inner_text() and first[1].startswith("search[")

            episodes = page.locator(".widget-dropdown", has_text="episode").locator("select")
            assert episodes.locator("option").count() == 4
            episodes.select_option(index=1)  # another episode: its first turn
            expect(shown).to_contain_text("Episode #1", timeout=PAGE_TIMEOUT_MS)
            expect(shown).to_contain_text("Turn 1 / ", timeout=PAGE_TIMEOUT_MS)
            second = turn_shown()
            assert second[0] != first[0] and second[1] != first[1] and second[1].startswith("search[")

            page.locator("button", has_text="next").click()  # another turn of that episode
            expect(shown).to_contain_text("Turn 2 / ", timeout=PAGE_TIMEOUT_MS)
            third = turn_shown()
            assert third[0] != second[0] and third[1] != second[1] and third[1].startswith("click[")

            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
