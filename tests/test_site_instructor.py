"""The instructor's edition as an instructor meets it, in headless Chromium: each of its own pages
(the teaching guide and the worked solutions) loads without console errors or missing files, shows
the edition's banner, and fits a phone's screen; tables and equations fit or scroll with a cue, as
on the chapters' pages. Needs `make book-instructor` first (or SEQMODELS_INSTRUCTOR_SITE=<folder>).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from book_pages import site_server
from test_site import (  # noqa: F401 - `browser` is a fixture
    PHONE,
    SCREENSHOTS,
    assert_equations_fit_the_column,
    assert_tables_fit_or_scroll_with_a_cue,
    browser,
    open_page,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from editions import BANNER, instructor_pages  # noqa: E402

pytestmark = pytest.mark.browser

SITE = Path(
    os.environ.get("SEQMODELS_INSTRUCTOR_SITE")
    or ROOT / "_build" / "instructor" / "_build" / "html"
).resolve()
PAGES = [f"{page}.html" for page in instructor_pages(ROOT)]
WIDE = {"width": 1400, "height": 900}


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no instructor's edition in {SITE}: run `make book-instructor` first")
    with site_server(SITE) as address:
        yield address


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400px", "400px"])
@pytest.mark.parametrize("path", PAGES)
def test_an_instructor_page_loads_shows_the_banner_and_fits(browser, server, path, viewport):  # noqa: F811
    page, errors, failed = open_page(browser, f"{server}/{path}", viewport=viewport)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    name = Path(path).with_suffix("").as_posix().removeprefix("book/").replace("/", "-")
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{viewport['width']}px.png"))
    assert errors == [], errors
    assert failed == [], failed
    assert BANNER in page.locator(".bd-header-announcement").inner_text()
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= viewport["width"], f"the page scrolls sideways ({width} px)"
    assert_tables_fit_or_scroll_with_a_cue(page, path, viewport["width"])
    # the rubrics quote the problem sets' questions as the notebooks show them: their display math
    # is set for a notebook's width, and scrolls visibly here (the phone check above holds it)
    if viewport["width"] >= 1400 and not path.endswith("guide/rubrics.html"):
        assert_equations_fit_the_column(page, path)
    page.close()


def test_each_exercise_links_to_its_solution_and_back(browser, server):  # noqa: F811
    """Chapter 4's exercises each end with a link to their worked solution, in order, and the
    solution's title links back to its exercise."""
    page, errors, failed = open_page(browser, f"{server}/book/ch04_gradients/distance.html")
    links = page.eval_on_selector_all(
        ".seqmodels-solution-link a", "links => links.map(a => a.getAttribute('href'))"
    )
    expected = [f"../instructor/solutions/ch04.html#ch04-ex{k}-solution" for k in range(1, 7)]
    assert links == expected
    page.goto(f"{server}/book/instructor/solutions/ch04.html", wait_until="networkidle")
    back = page.eval_on_selector_all(
        "#ch04-ex1-solution a", "links => links.map(a => a.getAttribute('href'))"
    )
    assert any(h.endswith("ch04_gradients/distance.html#ch04-ex1") for h in back), back
    assert errors == [] and failed == [], (errors, failed)
    page.close()
