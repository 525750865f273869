"""Every page in headless Chromium against the dashboard served by Streamlit: no exception, no
error alert, no "None" or traceback, and a screenshot of each (``KFORGE_UI_SCREENSHOTS=docs/screenshots``
keeps them); every table fits a 1400 px wide window without scrolling sideways; a fresh dashboard
whose first request is a page link shows the app's own navigation and the linked run; the sidebar
keeps the chosen run, and a node of the revision tree opens its candidate."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from servicekit.security import Security
from tests.ui.seeding import EAGER_US, FAILURES, FAILURES_RUN_ID, LLM_PROPOSER, LLM_RUN_ID, relu_card
from ui.cli import streamlit_command
from ui.connection import ForgeTarget

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1400, "height": 1700}
START_TIMEOUT_S = 60.0
PAGE_TIMEOUT_MS = 30_000
ERROR_SELECTORS = ('[data-testid="stException"]', '[data-testid="stAlertContentError"]')
# (screenshot name, URL path and query, title the page shows, an element that shows it finished)
# "{optimized}" stands for the run made by the real `kforge optimize`.
CHART, GRAPH = '[data-testid="stVegaLiteChart"]', '[data-testid="stGraphVizChart"] svg'
TABLE = '[data-testid="stDataFrame"]'
PAGES = [
    ("runs", "", "Runs", '[data-testid="stDataFrame"]'),
    ("run", "run?run={optimized}", "Run", '[data-testid="stVegaLiteChart"]'),
    ("run-llm", f"run?run={LLM_RUN_ID}", "Run", '[data-testid="stVegaLiteChart"]'),
    ("card", "card?run={optimized}", "Card", '[data-testid="stGraphVizChart"] svg'),
    ("card-llm", f"card?run={LLM_RUN_ID}", "Card", '[data-testid="stGraphVizChart"] svg'),
    ("candidate", f"candidate?run={LLM_RUN_ID}&candidate=b2b2b2b2b2b2", "Candidate", '[data-testid="stCode"]'),
    ("providers", "providers", "Providers", '[data-testid="stVegaLiteChart"]'),
    ("package", "package?run={optimized}", "Package", '[data-testid="stDataFrame"]'),
    ("run-failures", f"run?run={FAILURES_RUN_ID}", "Run", '[data-testid="stVegaLiteChart"]'),
    ("card-failures", f"card?run={FAILURES_RUN_ID}", "Card", '[data-testid="stGraphVizChart"] svg'),
    ("failures", f"failures?run={FAILURES_RUN_ID}", "Failures", '[data-testid="stExpander"]'),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_dashboard(forge_address: str) -> Iterator[str]:
    """A dashboard of its own, served by ``streamlit run`` as ``kforge ui`` starts it; its URL."""
    port = _free_port()
    env = {**os.environ, **ForgeTarget(forge_address, Security()).to_environ()}
    proc = subprocess.Popen(streamlit_command(port, "127.0.0.1"), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start: {proc.stderr.read().decode() if proc.stderr else ''}"
                                       ) from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def dashboard_url(forge_address: str) -> Iterator[str]:
    with serve_dashboard(forge_address) as url:
        yield url


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Page]:
    assert CHROMIUM.is_file(), "Debian's chromium is missing: scripts/setup.sh installs it"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        yield page
        browser.close()


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("KFORGE_UI_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _settle(page: Page, title: str, ready: str) -> None:
    """Wait for the page titled ``title`` to show ``ready`` and for its script to finish."""
    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=PAGE_TIMEOUT_MS)
    page.locator(ready).first.wait_for(timeout=PAGE_TIMEOUT_MS)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                           timeout=PAGE_TIMEOUT_MS)
    page.wait_for_timeout(800)  # let charts finish drawing


def _assert_clean(page: Page, name: str) -> str:
    """No exception, no error alert, no literal None and no traceback on the page; its text."""
    for selector in ERROR_SELECTORS:
        found = page.locator(selector)
        assert found.count() == 0, f"{name}: {found.first.inner_text()}"
    shown = page.inner_text("body")
    assert "None" not in shown and "Traceback" not in shown, f"{name}: {shown[:3000]}"
    return shown


@pytest.mark.parametrize(("name", "path", "title", "ready"), PAGES, ids=[p[0] for p in PAGES])
def test_page_loads_without_errors(browser_page: Page, dashboard_url: str, screenshot_dir: Path,
                                   optimized_run_id: str, name: str, path: str, title: str, ready: str) -> None:
    page = browser_page
    page.goto(f"{dashboard_url}/{path.format(optimized=optimized_run_id)}", timeout=PAGE_TIMEOUT_MS)
    _settle(page, title, ready)
    shown = _assert_clean(page, name)
    if name == "failures":
        assert all(description in shown for _, _, _, description, _, _ in FAILURES), shown[:3000]
    shot = screenshot_dir / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_the_sidebar_keeps_the_chosen_run_from_run_to_card(browser_page: Page, dashboard_url: str) -> None:
    page = browser_page
    page.goto(f"{dashboard_url}/run?run={LLM_RUN_ID}", timeout=PAGE_TIMEOUT_MS)  # not the run listed first
    _settle(page, "Run", '[data-testid="stVegaLiteChart"]')
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Card", exact=True).click()
    _settle(page, "Card", '[data-testid="stGraphVizChart"] svg')
    shown = _assert_clean(page, "card after run")
    assert "This run has no cards yet" not in shown, shown[:3000]
    assert f"run={LLM_RUN_ID}" in page.url and "c3c3c3c3 #3" in shown  # the LLM run's tree, not another's


def test_a_node_of_the_revision_tree_opens_its_candidate(browser_page: Page, dashboard_url: str) -> None:
    page = browser_page
    page.goto(f"{dashboard_url}/card?run={LLM_RUN_ID}", timeout=PAGE_TIMEOUT_MS)
    _settle(page, "Card", '[data-testid="stGraphVizChart"] svg')
    page.locator('[data-testid="stGraphVizChart"] svg g.node', has_text="b2b2b2b2").locator("a").first.click()
    _settle(page, "Candidate", '[data-testid="stCode"]')
    shown = _assert_clean(page, "candidate from the tree")
    assert "candidate=b2b2b2b2b2b2" in page.url and "COMPILE_ERROR" in shown


# Each table's scroller (a data frame's grid, a static table itself): how wide its content is, how
# wide it shows, and where its right edge is; tables on a tab or in an expander not shown are left out.
TABLE_EXTENTS = """() => [
  ...[...document.querySelectorAll('[data-testid="stDataFrame"]')].map(t => t.querySelector('.dvn-scroller')),
  ...document.querySelectorAll('[data-testid="stTable"]'),
].filter(e => e && e.getClientRects().length).map(e => ({
  scroll: e.scrollWidth, client: e.clientWidth, right: e.getBoundingClientRect().right,
}))"""
# (page, URL path and query, title, an element that shows it finished, the text of a tab or
# expander that holds a table and must be opened first)
TABLE_PAGES = [
    ("runs", "", "Runs", TABLE, None),
    ("run", "run?run={optimized}", "Run", CHART, None),
    ("run-failures", f"run?run={FAILURES_RUN_ID}", "Run", CHART, None),
    ("card", f"card?run={LLM_RUN_ID}", "Card", GRAPH, None),
    ("card-failures", f"card?run={FAILURES_RUN_ID}", "Card", GRAPH, None),
    ("candidate", f"candidate?run={LLM_RUN_ID}&candidate=b2b2b2b2b2b2", "Candidate", '[data-testid="stCode"]', "Logs"),
    ("package", "package?run={optimized}", "Package", TABLE, "cards on eager"),
    ("failures", f"failures?run={FAILURES_RUN_ID}", "Failures", TABLE, None),
    ("providers", "providers", "Providers", CHART, None),
]


@pytest.mark.parametrize(("name", "path", "title", "ready", "reveal"), TABLE_PAGES, ids=[p[0] for p in TABLE_PAGES])
def test_every_table_fits_a_1400_px_window(browser_page: Page, dashboard_url: str, optimized_run_id: str,
                                           name: str, path: str, title: str, ready: str, reveal: str | None) -> None:
    page = browser_page
    page.goto(f"{dashboard_url}/{path.format(optimized=optimized_run_id)}", timeout=PAGE_TIMEOUT_MS)
    _settle(page, title, ready)
    if reveal is not None:
        page.get_by_text(reveal).first.click()
        page.wait_for_timeout(800)
    extents = page.evaluate(TABLE_EXTENTS)
    for _ in range(20):  # a data frame's grid may draw after the element the page settled on
        if extents:
            break
        page.wait_for_timeout(500)
        extents = page.evaluate(TABLE_EXTENTS)
    assert extents, f"{name}: no table shown"
    for extent in extents:
        assert extent["scroll"] <= extent["client"], f"{name}: a table scrolls sideways: {extent}"
        assert extent["right"] <= VIEWPORT["width"], f"{name}: a table ends past the window: {extent}"


APP_PAGES = ["Runs", "Run", "Card", "Candidate", "Failures", "Providers", "Package"]
# (first URL a fresh dashboard is asked for, the page's title, an element that shows it finished,
# text of the linked run's own data)
DEEP_LINKS = [
    ("run", f"run?run={LLM_RUN_ID}", "Run", CHART, f"proposer {LLM_PROPOSER}"),
    ("card", f"card?run={LLM_RUN_ID}&card={relu_card(0.4, EAGER_US).id}", "Card", GRAPH, "c3c3c3c3 #3"),
]


@pytest.mark.parametrize(("name", "path", "title", "ready", "own_text"), DEEP_LINKS, ids=[d[0] for d in DEEP_LINKS])
def test_a_fresh_dashboard_first_asked_for_a_page_link_shows_the_app(browser_page: Page, forge_address: str,
                                                                     name: str, path: str, title: str, ready: str,
                                                                     own_text: str) -> None:
    with serve_dashboard(forge_address) as url:
        page = browser_page
        page.goto(f"{url}/{path}", timeout=PAGE_TIMEOUT_MS)
        _settle(page, title, ready)
        shown = _assert_clean(page, f"first request {name}")
        nav = page.get_by_test_id("stSidebarNav").get_by_role("link").all_inner_texts()
        assert [text.strip().splitlines()[-1] for text in nav] == APP_PAGES, nav  # each after its icon's name
        run_box = page.get_by_test_id("stSelectbox").first
        assert run_box.inner_text() == "Run"
        assert run_box.locator("input").input_value().startswith(LLM_RUN_ID)  # the linked run, not the first
        assert f"run={LLM_RUN_ID}" in page.url and own_text in shown, shown[:3000]
