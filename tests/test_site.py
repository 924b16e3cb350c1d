"""The built site as a reader meets it, in headless Chromium: pages load without console errors,
math is typeset by the bundled MathJax, figures load, and executed outputs are on the page.

Needs `make book` first. Chromium comes from Debian's `chromium` package (see .ci/run); without it
these tests are skipped locally and fail in CI (SEQMODELS_REQUIRE_BROWSER=1).
"""

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "_build" / "screenshots"
PAGES = ["book/intro.html", "book/ch01_language_models.html"]


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").is_file():
        pytest.fail("no built site in _build/html: run `make book` first")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.log_message = lambda *a, **k: None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        if os.environ.get("SEQMODELS_REQUIRE_BROWSER"):
            pytest.fail(f"Chromium not found at {CHROMIUM}; install Debian's chromium package")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-quic",
                "--no-first-run",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


def open_page(browser, url):
    """Load `url`, wait for MathJax, and return (page, console errors, failed requests)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, failed = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "requestfailed",
        lambda r: failed.append(r.url) if r.url.startswith(url.split("/book/")[0]) else None,
    )
    page.goto(url, wait_until="networkidle")
    page.wait_for_function(
        "() => !window.MathJax || (window.MathJax.startup && window.MathJax.startup.promise)"
    )
    page.evaluate("() => window.MathJax ? window.MathJax.startup.promise : null")
    return page, errors, failed


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_without_console_errors_or_missing_files(browser, server, path):
    page, errors, failed = open_page(browser, f"{server}/{path}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / (Path(path).stem + ".png")))
    assert errors == [], errors
    assert failed == [], failed
    page.close()


def test_chapter_math_is_typeset_and_numbered(browser, server):
    page, _, _ = open_page(browser, f"{server}/book/ch01_language_models.html")
    assert page.locator("mjx-container").count() > 20
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
    assert page.locator("div.math span.eqno").count() >= 6  # numbered display equations
    page.close()


def test_chapter_figures_load_and_outputs_are_executed(browser, server):
    page, _, _ = open_page(browser, f"{server}/book/ch01_language_models.html")
    images = page.locator("img")
    assert images.count() >= 4
    widths = page.evaluate(
        "() => Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)"
    )
    assert all(w > 0 for w in widths), widths
    assert page.locator("figcaption").count() >= 4
    text = page.inner_text("main")
    assert "Kneser" in text and "test perplexity" in text
    assert page.locator(".cell_output").count() > 10
    page.close()


def test_chapter_offers_a_notebook_download(browser, server):
    page, _, _ = open_page(browser, f"{server}/book/ch01_language_models.html")
    link = page.locator("a.download", has_text="Download this chapter as a notebook")
    href = link.get_attribute("href")
    response = page.request.get(f"{server}/book/{href}")
    assert response.ok and response.json()["nbformat"] == 4
    page.close()
