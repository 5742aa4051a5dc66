"""Fixtures of the dashboard's browser tests: the Debian Chromium (scripts/ensure-chromium.sh) driven
by Playwright, a real `smd serve` (embedded SQLite and filesystem broker) on a free port, and pages
that record the browser console and take screenshots into test-artifacts/screenshots (not committed)."""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.procs import TEARDOWN_SECONDS, spawn, stop, unreadable_cifar10, wait_http
from tests.servers import free_port

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def chromium_path() -> str:
    path = os.environ.get("SMD_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("no chromium on PATH: run scripts/ensure-chromium.sh (make test does), or set SMD_CHROMIUM")
    return path


@pytest.fixture(scope="module")
def browser():
    # module scope: Playwright's sync API keeps an event loop running in this thread while it is open,
    # and later tests call asyncio.run()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield browser
        browser.close()


class Console:
    """Errors of a page: console.error messages, uncaught exceptions and failed requests."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))


@pytest.fixture
def page(browser):
    """A fresh browser context (its own sessionStorage) and page; the test asserts on page.console."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.console = Console(page)
    page.set_default_timeout(30_000)
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@contextmanager
def serve(tmp: Path, **settings: str) -> Iterator[tuple[str, dict]]:
    """`smd serve` with ``SMD_*`` ``settings``; yields (base URL, its environment)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    env.update(SMD_PORT=str(port), SMD_STATE_DIR=str(tmp / "state"), SMD_FLUSH_SECONDS="0.3",
               SMD_SWEEP_SECONDS="0.5", SMD_EVENTS_POLL_SECONDS="0.2", **settings)
    proc = spawn([sys.executable, "-m", "smdcli.main", "serve"], env, tmp / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", proc, tmp / "serve.log")
        yield base, env
    finally:
        stop(proc, timeout=TEARDOWN_SECONDS)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A dashboard with auth off: its base URL."""
    tmp = tmp_path_factory.mktemp("dashboard")   # its CIFAR-10 is unreadable: a run that fails at its start
    with serve(tmp, SMD_AUTH="off", SMD_DATA_DIR=unreadable_cifar10(tmp / "data")) as (base, _):
        yield base
