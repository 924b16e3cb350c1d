"""The built site as a reader meets it, in headless Chromium: pages load without console errors,
math is typeset by the bundled MathJax, figures load, and executed outputs are on the page.

Needs `make book` first (or SEQMODELS_SITE=<folder> naming another built site). Chromium comes
from Debian's `chromium` package (see .ci/run); without it
these tests are skipped locally and fail in CI (SEQMODELS_REQUIRE_BROWSER=1).
"""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from book_pages import chapter_html, site_server, toc_pages

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SEQMODELS_SITE") or ROOT / "_build" / "html").resolve()
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "_build" / "screenshots"
# full-page screenshots of every chapter page at both widths, for a person to look at: about half a
# second each, so `make test` takes them only when asked (SEQMODELS_SCREENSHOTS=1)
FULL_PAGE_SCREENSHOTS = os.environ.get("SEQMODELS_SCREENSHOTS") == "1"
PAGES = toc_pages()  # every page of the book, in reading order
CHAPTER_PAGES = chapter_html()  # {chapter's landing page: (its pages)}, site paths
LANDINGS = list(CHAPTER_PAGES)
# Chapter 1's page on counting and smoothing: sections in its contents, long display equations
CH1_SMOOTHING = "book/ch01_language_models/ngrams.html"
PHONE = {"width": 400, "height": 850}


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").is_file():
        pytest.fail("no built site in _build/html: run `make book` first")
    with site_server(SITE) as address:
        yield address


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


def open_page(browser, url, viewport=None):
    """Load `url`, wait for MathJax, and return (page, console errors, failed requests).
    A `viewport` as narrow as a phone's gets a phone's touch screen too."""
    viewport = viewport or {"width": 1280, "height": 900}
    phone = viewport["width"] < 600
    page = browser.new_page(viewport=viewport, has_touch=phone, is_mobile=phone)
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


CHAPTER_PAGE = {p for pages in CHAPTER_PAGES.values() for p in pages}


@pytest.mark.parametrize("path", [p for p in PAGES if p not in CHAPTER_PAGE])
def test_page_loads_without_console_errors_or_missing_files(browser, server, path):
    """The pages that are not a chapter's (a chapter's are loaded, and checked for the same, by
    `test_chapter_fits_the_screen_and_shows_its_explorer`)."""
    page, errors, failed = open_page(browser, f"{server}/{path}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / (Path(path).stem + ".png")))
    assert errors == [], errors
    assert failed == [], failed
    page.close()


def test_chapter_math_figures_and_outputs(browser, server):
    """Chapter 1's pages together: math typeset by the bundled MathJax and numbered, figures
    loaded with captions, executed outputs on the page."""
    typeset = numbered = images = captions = outputs = 0
    text = ""
    for path in CHAPTER_PAGES["book/ch01_language_models.html"]:
        page, _, _ = open_page(browser, f"{server}/{path}")
        typeset += page.locator("mjx-container").count()
        assert page.locator("mjx-merror").count() == 0, f"{path}: MathJax reported a TeX error"
        numbered += page.locator("div.math span.eqno").count()
        widths = page.evaluate(
            "() => Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)"
        )
        assert all(w > 0 for w in widths), f"{path}: {widths}"
        images += len(widths)
        captions += page.locator("figcaption").count()
        outputs += page.locator(".cell_output").count()
        text += page.inner_text("main")
        page.close()
    assert typeset > 20 and numbered >= 6  # numbered display equations
    assert images >= 4 and captions >= 4 and outputs > 10
    assert "Kneser" in text and "test perplexity" in text


@pytest.mark.built
@pytest.mark.parametrize("path", LANDINGS)
def test_chapter_offers_a_notebook_download(path):
    """The opening box links the chapter's notebook; every page of the chapter offers the same file
    in the header's download menu (not the page's MyST source). Read from the built pages: the
    links are static HTML."""
    landing = SITE / path
    if not landing.is_file():
        pytest.fail(f"{landing} is missing: run `make book` first")
    found = re.search(
        r'<a class="reference download internal"[^>]*href="([^"]+\.ipynb)"', landing.read_text()
    )
    assert found, f"{path}: the opening box links no notebook"
    notebook = (landing.parent / found[1]).resolve()
    assert json.loads(notebook.read_text(encoding="utf-8"))["nbformat"] == 4
    for sub in CHAPTER_PAGES[path]:
        html = (SITE / sub).read_text(encoding="utf-8")
        menu = html.split("dropdown-download-buttons", 1)[1].split("</ul>", 1)[0]
        hrefs = re.findall(r'href="([^"]+)"', menu)
        offered = [(SITE / sub).parent.joinpath(h).resolve() for h in hrefs if h.endswith(".ipynb")]
        assert offered == [notebook], f"{sub}: the header offers {hrefs}, not {found[1]}"
        assert not [h for h in hrefs if h.endswith(".md")], f"{sub} offers its MyST source"


def visible_count(page, selector: str) -> int:
    return page.evaluate(
        """(selector) => Array.from(document.querySelectorAll(selector)).filter(e => {
             const r = e.getBoundingClientRect(), s = getComputedStyle(e);
             return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none";
           }).length""",
        selector,
    )


def on_screen(page, locator, timeout_ms: int = 0) -> bool:
    """Whether `locator` is visible and inside the phone's screen (waiting for a slide-in)."""
    for _ in range(max(1, timeout_ms // 100)):
        box = locator.bounding_box() if locator.is_visible() else None
        if box and box["x"] >= 0 and box["x"] + box["width"] / 2 <= PHONE["width"]:
            return True
        if timeout_ms:
            page.wait_for_timeout(100)
    return False


def test_phone_menu_button_opens_the_chapter_list(browser, server):
    page, errors, _ = open_page(browser, f"{server}/book/intro.html", viewport=PHONE)
    chapter = page.locator(".bd-sidebar-primary a", has_text="Language models and perplexity")
    assert not on_screen(page, chapter.first)  # the sidebar is folded away on a phone
    toggles = page.locator(".primary-toggle")
    visible = [toggles.nth(i) for i in range(toggles.count()) if toggles.nth(i).is_visible()]
    assert len(visible) == 1, "one visible ☰ button"
    visible[0].tap()
    assert on_screen(page, chapter.first, timeout_ms=5000), "☰ did not open the chapter list"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "phone-menu-open.png"))
    chapter.first.tap()
    page.wait_for_url("**/ch01_language_models.html")
    assert errors == [], errors
    page.close()


def test_phone_contents_button_opens_the_page_contents(browser, server):
    page, _, _ = open_page(browser, f"{server}/{CH1_SMOOTHING}", viewport=PHONE)
    section = page.locator(".bd-sidebar-secondary a", has_text="Smoothing").first
    assert not on_screen(page, section)
    toggles = page.locator(".secondary-toggle")
    visible = [toggles.nth(i) for i in range(toggles.count()) if toggles.nth(i).is_visible()]
    assert len(visible) == 1
    visible[0].tap()
    assert on_screen(page, section, timeout_ms=5000), "the contents button did not open"
    page.close()


@pytest.mark.parametrize(
    "viewport", [PHONE, {"width": 1280, "height": 900}], ids=["400px", "1280px"]
)
def test_one_search_box(browser, server, viewport):
    page, _, _ = open_page(browser, f"{server}/book/ch01_language_models.html", viewport=viewport)
    assert visible_count(page, ".search-button-field, .search-button, input[type=search]") == 1
    assert visible_count(page, ".bd-header") == 0, "no extra header above the layout"
    page.close()


def test_long_equations_scroll_visibly_at_phone_width(browser, server):
    page, _, _ = open_page(browser, f"{server}/{CH1_SMOOTHING}", viewport=PHONE)
    equations = page.evaluate(
        """() => Array.from(document.querySelectorAll("div.math")).map(d => {
             const m = d.querySelector("mjx-container"), s = getComputedStyle(m);
             const column = d.closest("article").getBoundingClientRect();
             const before = m.scrollLeft; m.scrollLeft = m.scrollWidth; const after = m.scrollLeft;
             m.scrollLeft = before;
             return {id: d.id, right: m.getBoundingClientRect().right, column: column.right,
                     overflows: m.scrollWidth > m.clientWidth + 1, overflowX: s.overflowX,
                     scrollbar: s.scrollbarWidth, shadow: s.backgroundImage, scrolled: after};
           })"""
    )
    assert len(equations) >= 4
    for eq in equations:
        assert eq["right"] <= eq["column"] + 1, f"{eq['id']} sticks out of the text column"
        if eq["overflows"]:
            assert eq["overflowX"] in {"auto", "scroll"}, eq
            assert eq["scrollbar"] != "none", eq
            assert "gradient" in eq["shadow"], f"{eq['id']} scrolls with no hint"
            assert eq["scrolled"] > 0, f"{eq['id']} is clipped and does not scroll"
    assert any(eq["overflows"] for eq in equations)  # the phone case this test is about
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "the page itself scrolls sideways"
    page.close()


@pytest.mark.parametrize("origin", ["http", "file"])
def test_search_shows_snippets_without_latex(browser, server, origin):
    root = server if origin == "http" else SITE.as_uri()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{root}/search.html?q=perplexity", wait_until="load")
    page.wait_for_selector("#search-results li p.context", timeout=15000)
    page.wait_for_timeout(500)
    results = page.locator("#search-results li")
    snippets = page.locator("#search-results li p.context").all_inner_texts()
    assert results.count() >= 2 and len(snippets) == results.count()
    assert any("1.5. Perplexity" in s or "perplexity" in s.lower() for s in snippets)
    for snippet in snippets:
        for tex in ("\\(", "\\[", "\\frac", "\\mid", "\\begin", "\\dots"):
            assert tex not in snippet, snippet
    assert page.locator("#search-results span.highlighted").count() >= 1
    # from disk the theme's icon fonts are refused (CORS) but drawn by its script; no fetch fails
    assert not [e for e in errors if "fetch" in e.lower()], errors
    if origin == "http":
        assert errors == [], errors
    page.close()


WIDE = {"width": 1400, "height": 900}


def assert_equations_fit_the_column(page, path: str) -> None:
    """Issue 30: at 1,400 px no display equation is wider than the text column (long ones break
    over aligned lines); at 400 px they may scroll inside their own box."""
    wide = page.evaluate(
        """() => Array.from(document.querySelectorAll("div.math")).map(d => {
             const m = d.querySelector("mjx-container");
             return {id: d.id, over: m.scrollWidth - m.clientWidth};
           }).filter(e => e.over > 1)"""
    )
    assert wide == [], f"{path}: wider than the column by " + ", ".join(
        f"{e['id'] or '(unlabelled)'} {e['over']} px" for e in wide
    )


def assert_tables_fit_or_scroll_with_a_cue(page, path: str, width: int) -> None:
    """Issue 30: no table overflows at 1,400 px; at 400 px a wide table scrolls inside its own box,
    with a visible cue, under a caption that is whole (outside the scrolled box)."""
    tables = page.evaluate(
        """() => Array.from(document.querySelectorAll("article table")).map(t => {
             const box = t.closest("div.pst-scrollable-table-container");
             const figure = t.closest("div.course-table");
             const caption = figure && figure.querySelector(":scope > div.course-table-caption");
             const column = t.closest("article").getBoundingClientRect();
             const s = box ? getComputedStyle(box) : null;
             const edges = e => ({left: e.getBoundingClientRect().left,
                                  right: e.getBoundingClientRect().right});
             return {id: t.id, captioned: t.id.startsWith("tbl-"),
                     over: box ? box.scrollWidth - box.clientWidth : 0,
                     overflowX: s && s.overflowX, shadow: s && s.backgroundImage,
                     caption: caption && edges(caption), inner: t.querySelector("caption") !== null,
                     column: {left: column.left, right: column.right}};
           })"""
    )
    for t in tables:
        name = f"{path} {t['id'] or '(table)'}"
        if width >= 1400:
            assert t["over"] <= 1, f"{name} overflows its column by {t['over']} px at 1,400 px"
        if t["captioned"]:
            assert t["caption"] and not t["inner"], f"{name}: the caption is not above the box"
            assert t["column"]["left"] - 1 <= t["caption"]["left"], name
            assert t["caption"]["right"] <= t["column"]["right"] + 1, f"{name}: caption cut"
        if t["over"] > 1:
            assert t["overflowX"] in {"auto", "scroll"}, name
            assert "gradient" in (t["shadow"] or ""), f"{name} scrolls with no cue"


def assert_shown_code_fits_the_column(page, path: str) -> None:
    """The library code a chapter shows (literalinclude) reads without scrolling at 1,400 px."""
    blocks = page.evaluate(
        """() => Array.from(document.querySelectorAll("article div.literal-block-wrapper")).map(
             w => ({caption: w.querySelector(".caption-text")?.textContent,
                    overflow: w.querySelector("pre").scrollWidth - w.querySelector("pre").clientWidth}))"""
    )
    # which page shows which object is test_shown_code's; here: what a page shows fits
    for block in blocks:
        assert block["overflow"] <= 1, f"{path}: {block['caption']} scrolls sideways at 1,400 px"


def assert_key_ideas_take_two_lines(page, path: str) -> None:
    """Each section's key idea is at most two lines of the desktop column."""
    lines = page.evaluate(
        """() => Array.from(document.querySelectorAll(
               "article div.admonition.key-idea > p:not(.admonition-title)")).map(p =>
             Math.round(p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight)))"""
    )
    assert lines or path in CHAPTER_PAGES, f"{path} has no key idea"  # a landing page has none
    assert max(lines, default=0) <= 2, f"{path}: key ideas of {lines} lines at 1,400 px"


def assert_first_screen_shows_title_summary_and_box(page, path: str, height: int) -> None:
    """Issue 30: on a phone the first screen holds the chapter's title, its two-line summary and
    the top of the opening box (goals, prerequisites, time)."""
    found = page.evaluate(
        """() => {
             const article = document.querySelector("article");
             const title = article.querySelector("h1");
             const summary = title.closest("section").querySelector(":scope > p");
             const box = article.querySelector("div.admonition.tip");
             const top = e => e ? e.getBoundingClientRect().top + window.scrollY : null;
             return {title: top(title), summary: top(summary), box: top(box),
                     between: summary && box && summary.nextElementSibling === box};
           }"""
    )
    assert found["between"], f"{path}: the opening box does not follow the summary"
    assert found["title"] < found["summary"] < found["box"] < height - 100, found


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400px", "400px"])
@pytest.mark.parametrize("path", [p for pages in CHAPTER_PAGES.values() for p in pages])
def test_chapter_fits_the_screen_and_shows_its_explorer(browser, server, path, viewport):
    """Each page of each chapter at 1,400 and 400 px (full-page screenshots in
    _build/screenshots/): the page never scrolls sideways, no figure is wider than the text
    column; a landing page's opening box gives goals, prerequisites and reading and running times
    (and on a phone is on the first screen); an explorer's static figure has its alt text and the
    line saying the notebook makes it live (`test_every_chapter_has_an_explorer` finds one per
    chapter); tables, equations as the assertions above say (one page load for all of them)."""
    page, errors, failed = open_page(browser, f"{server}/{path}", viewport=viewport)
    if FULL_PAGE_SCREENSHOTS:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = f"{Path(path).with_suffix('').as_posix().removeprefix('book/').replace('/', '-')}"
        name += f"-{viewport['width']}px.png"
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    assert errors == [], errors
    assert failed == [], failed
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= viewport["width"], f"the page scrolls sideways ({width} px)"
    figures = page.evaluate(
        """() => Array.from(document.querySelectorAll("article img")).map(i => {
             const column = i.closest("article").getBoundingClientRect();
             const box = i.getBoundingClientRect();
             return {src: i.src.split("/").pop(), alt: i.alt, right: box.right,
                     column: column.right, width: box.width};
           })"""
    )
    for figure in figures:
        assert figure["right"] <= figure["column"] + 1, f"{figure['src']} sticks out"
    landing = path in CHAPTER_PAGES
    if landing:
        opening = page.locator("article .admonition.tip").first.inner_text()
        for part in ("You will be able to", "You need", "Reading about", "min", "executed in"):
            assert part in opening, f"the opening box lacks {part!r}"
    explorers = page.locator("article figure[id*='explorer']")
    for i in range(explorers.count()):
        assert "controls are live" in explorers.nth(i).inner_text()
        alt = explorers.nth(i).locator("img").get_attribute("alt")
        assert alt and len(alt) > 40 and "{glue" not in alt
    assert_tables_fit_or_scroll_with_a_cue(page, path, viewport["width"])
    if viewport["width"] >= 1400:
        assert_equations_fit_the_column(page, path)
        assert_shown_code_fits_the_column(page, path)
        assert_key_ideas_take_two_lines(page, path)
    elif landing:
        assert_first_screen_shows_title_summary_and_box(page, path, viewport["height"])
    page.close()


@pytest.mark.built
@pytest.mark.parametrize("landing", LANDINGS)
def test_every_chapter_has_an_explorer(landing):
    """Each chapter shows at least one explorer (a figure labelled ``fig-…explorer…``) on one of
    its pages."""
    found = []
    for path in CHAPTER_PAGES[landing]:
        built = SITE / path
        if not built.is_file():
            pytest.fail(f"{built} is missing: run `make book` first")
        if re.search(r'<figure[^>]*\bid="[^"]*explorer', built.read_text(encoding="utf-8")):
            found.append(path)
    assert found, f"no page of {landing} has an explorer figure"
