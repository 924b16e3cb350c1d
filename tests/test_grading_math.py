"""Math in formgrader and the feedback (`seqmodels.grading.math_pages`), in headless Chromium.

A graded notebook with the task text's math (a locked cell), an honest written derivation and
hostile ones (Markdown answer cells) goes through `StudentTextAsText`, then is rendered twice:
as formgrader renders a submission (nbconvert's HTMLExporter with formgrader's configuration —
its template and the course's ``nbgrader_config.py`` — served with formgrader's own static files),
and as ``generate_feedback`` renders a page (`FeedbackExporter` with GenerateFeedback's
configuration, opened from a file). Every request that leaves the page's own origin is refused and
recorded. Without Chromium these tests are skipped locally and fail in CI
(SEQMODELS_REQUIRE_BROWSER=1), like tests/test_site.py.
"""

import copy
import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from seqmodels.grading import math_pages
from seqmodels.grading.preprocessors import FeedbackExporter, StudentTextAsText

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

TASK = (
    "Inputs have shape $(B, T, d)$; float64 results must be within "
    "$10^{-6} + 10^{-6}|\\text{expected}|$ of the reference."
)
HONEST = (
    "By the chain rule, **each step** multiplies:\n\n"
    "$$\\frac{\\partial L}{\\partial h_t} = \\frac{\\partial L}{\\partial h_{t+1}} W^\\top$$\n\n"
    "so $\\frac{\\partial L}{\\partial h}$ vanishes when $\\|W\\| < 1$."
)
HOSTILE = {
    "href": "Click $\\href{javascript:alert(1)}{\\text{here}}$ and $\\href{https://example.com}{x}$",
    "unicode": "$\\unicode{x263A}$ and $\\unicode[Comic Sans MS]{x263A}$",
    "class": "$\\class{panel}{x} \\style{background:url(javascript:alert(2))}{y} \\cssId{top}{z}$",
    "require": "$\\require{action} \\toggle{a}{b}\\endtoggle$",
    "newcommand": "$\\renewcommand{\\text}[1]{\\mathrm{OWNED}}$",
    "img": "A picture <img src=x onerror=alert(3)> here",
    "script": "<script>alert(4)</script> and <svg onload=alert(5)><circle r=9 /></svg>",
    "link": "[see](javascript:alert(6)) <a href='javascript:alert(7)'>this</a>",
    "iframe": "<iframe srcdoc='<script>alert(8)</script>'></iframe> `$x$ in code`",
    "close": "</div></div><script>alert(9)</script>",
}
ATTACK_TEXT = ["alert(3)", "alert(4)", "onload=alert(5)", "javascript:alert(6)"]


def _cell(source, grade_id, *, solution=False, locked=False, points=None, kind="markdown"):
    cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
    cell.metadata.nbgrader = {
        "grade_id": grade_id,
        "solution": solution,
        "grade": points is not None,
        "locked": locked,
        "schema_version": 3,
        **({"points": points, "score": points / 2} if points is not None else {}),
    }
    return cell


def graded_notebook() -> nbformat.NotebookNode:
    """The graded notebook as `StudentTextAsText` leaves it (it runs last in autograde)."""
    cells = [
        _cell(TASK, "task-text", locked=True),
        _cell(HONEST, "derive-honest", solution=True, points=2.0),
        *[
            _cell(text, f"derive-{name}", solution=True, points=1.0)
            for name, text in HOSTILE.items()
        ],
        new_markdown_cell("Notes of my own $\\alpha$ <script>alert(10)</script>"),
        new_raw_cell("<script>alert(11)</script>"),
        _cell(TASK.replace("Inputs", "Outputs"), "task-text-after", locked=True),
        _cell("x = 1", "code-answer", solution=True, kind="code"),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata.language_info = {"name": "python"}
    for index, cell in enumerate(nb.cells):
        StudentTextAsText().preprocess_cell(cell, {}, index)
    return nb


@functools.cache
def course_config() -> Config:
    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


def formgrader_page(notebook: Path, base_url: str) -> str:
    """What formgrader's SubmissionHandler writes: its HTMLExporter, configured as
    FormgradeExtension.initialize configures it (its own extra config, then the course's file)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

    config = FormgradeExtension().build_extra_config()
    config.merge(copy.deepcopy(course_config()))
    resources = {
        "assignment_id": "ps1",
        "notebook_id": "ps1",
        "submission_id": "abc",
        "index": 0,
        "total": 1,
        "base_url": base_url,
        "student": "student",
        "last_name": "Student",
        "first_name": "A",
        "notebook_path": "grading/autograded/student/ps1/ps1.ipynb",
    }
    html, _ = HTMLExporter(config=config).from_filename(str(notebook), resources=resources)
    return html


def feedback_page(nb: nbformat.NotebookNode) -> str:
    """What generate_feedback writes: `FeedbackExporter` with GenerateFeedback's configuration."""
    from nbgrader.converters import GenerateFeedback

    converter = GenerateFeedback(config=copy.deepcopy(course_config()))
    exporter = FeedbackExporter(config=converter.config)
    resources = {
        "nbgrader": {"notebook": "ps1", "score": 5.0, "max_score": 12.0, "late_penalty": 0},
        "inlining": {"css": []},
    }
    html, _ = exporter.from_notebook_node(nb, resources=resources)
    return html


def test_a_written_answer_is_sanitized_html_and_other_student_text_stays_text():
    nb = graded_notebook()
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    assert by_id["task-text"] == TASK  # trusted: untouched
    honest = by_id["derive-honest"]
    assert honest.startswith(f'<div class="{math_pages.ANSWER_CLASS}">') and "\n" not in honest
    assert "<strong>each step</strong>" in honest and "\\frac{\\partial L}" in honest
    for name in HOSTILE:
        answer = by_id[f"derive-{name}"]
        body = answer.removeprefix(f'<div class="{math_pages.ANSWER_CLASS}">')
        tags = re.findall(r"<\s*([A-Za-z][^\s/>]*)([^>]*)>", body)
        assert {tag for tag, _ in tags} <= math_pages.SAFE_TAGS, (name, tags)
        assert all(attributes.strip() == "" for _, attributes in tags), (name, tags)
        assert body.count("</div>") == 1, name  # the wrapper cannot be closed early
    assert "&lt;img src=x onerror=alert(3)&gt;" in by_id["derive-img"]  # shown as text
    own = [c.source for c in nb.cells if "nbgrader" not in c.metadata]
    assert all(source.startswith("```text\n") for source in own), own


def test_the_pages_load_the_pinned_mathjax_inlined_with_no_cdn(tmp_path):
    nb = graded_notebook()
    path = tmp_path / "ps1.ipynb"
    nbformat.write(nb, path)
    for page in (formgrader_page(path, "/base"), feedback_page(nb)):
        assert "cdnjs" not in page and "mathjax/2.7" not in page.lower()
        assert "tex-svg-full" not in page  # inlined, not fetched
        assert page.count("MathJax.startup.defaultReady()") == 1
        assert "<script>alert" not in page and "<svg" not in page and "<img" not in page


# ---------------------------------------------------------------- in the browser


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
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def formgrader_static():
    """nbgrader's formgrader static files at /base/formgrader/static/, as formgrader serves them."""
    from nbgrader.server_extensions.formgrader import handlers

    class Static(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path):
            prefix = "/base/formgrader/static/"
            if not path.startswith(prefix):
                return "/nonexistent"
            return str(Path(handlers.static_path) / path[len(prefix) :].split("?")[0])

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Static)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def open_page(browser, url: str, allowed: str, route=None):
    """Load `url`; refuse and record every request outside `allowed`; return the page, the
    refused requests, dialogs opened and console errors."""
    context = browser.new_context()
    page = context.new_page()
    refused, dialogs, errors = [], [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def guard(r):
        if r.request.url.startswith(allowed):
            return route(r) if route else r.continue_()
        refused.append(r.request.url)
        return r.abort()

    context.route("**/*", guard)
    page.goto(url)
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("MathJax.startup.promise")
    return context, page, refused, dialogs, errors


def check_math(page, dialogs, errors, refused):
    """Task text and the honest derivation typeset; hostile derivations inert."""
    assert refused == [] and dialogs == [] and errors == [], (refused, dialogs, errors)
    cells = page.locator(".text_cell_render")
    task = page.locator(".text_cell_render", has_text="Inputs have shape").first
    assert task.locator("mjx-container").count() == 2, task.inner_html()
    assert "$(B, T, d)$" not in task.inner_text()
    answers = page.locator(f".{math_pages.ANSWER_CLASS}")
    assert answers.count() == 1 + len(HOSTILE)
    honest = answers.nth(0)
    assert honest.locator("mjx-container").count() == 3, honest.inner_html()
    assert honest.locator("strong").inner_text() == "each step"
    # safe mode is on, allowing no URL, class, id or style (\href and \class are also undefined:
    # the html package is removed)
    allow = page.evaluate("MathJax.startup.document.safe && MathJax.startup.document.safe.allow")
    assert allow == {"URLs": "none", "classes": "none", "cssIDs": "none", "styles": "none"}
    # nothing that runs or links: no javascript: URL in the live DOM, no handler in the notebook,
    # and in its cells no link but MathJax's SVG glyphs (<use xlink:href="#MJX-..."> into its font cache)
    attributes = """(scope) => [...document.querySelectorAll(scope)].flatMap(e => [...e.attributes]
        .map(a => [e.tagName.toLowerCase(), a.name.toLowerCase(), a.value]))"""
    assert [a for a in page.evaluate(attributes, "*") if "javascript:" in a[2].lower()] == []
    assert [a for a in page.evaluate(attributes, "#notebook *") if a[1].startswith("on")] == []
    links = [a for a in page.evaluate(attributes, ".text_cell_render *") if "href" in a[1]]
    assert links and all(a[0] == "use" and a[2].startswith("#MJX-") for a in links), links
    inside = page.evaluate(
        f"""() => [...document.querySelectorAll('.{math_pages.ANSWER_CLASS} *')]
               .map(e => e.tagName.toLowerCase())"""
    )
    assert {"img", "script", "iframe", "a", "foreignobject"}.isdisjoint(inside), inside
    text = " ".join(answers.all_inner_texts())
    for attack in ATTACK_TEXT:
        assert attack in text, attack  # shown, as text
    # \renewcommand did not reach the task text below it, \require loaded nothing
    after = page.locator(".text_cell_render", has_text="Outputs have shape").first
    assert after.locator("mjx-container").count() == 2
    assert "OWNED" not in after.inner_html() and "expected" in after.inner_html()
    assert cells.count() >= 3
    # the student's own cells are code blocks MathJax leaves alone
    notes = page.locator(".text_cell_render pre", has_text="Notes of my own")
    assert notes.locator("mjx-container").count() == 0 and "$\\alpha$" in notes.inner_text()


@pytest.mark.browser
def test_feedback_page_renders_math_offline_and_no_student_markup_runs(browser, tmp_path):
    page_file = tmp_path / "ps1.html"
    page_file.write_text(feedback_page(graded_notebook()), encoding="utf-8")
    context, page, refused, dialogs, errors = open_page(
        browser, page_file.as_uri(), allowed=page_file.as_uri()
    )
    try:
        check_math(page, dialogs, errors, refused)
    finally:
        context.close()


@pytest.mark.browser
def test_formgrader_view_renders_math_offline_and_no_student_markup_runs(
    browser, tmp_path, formgrader_static
):
    notebook = tmp_path / "ps1.ipynb"
    nbformat.write(graded_notebook(), notebook)
    html = formgrader_page(notebook, "/base")
    page_url = f"{formgrader_static}/base/formgrader/submissions/abc/"

    def serve(r):
        if r.request.url == page_url:
            return r.fulfill(body=html, content_type="text/html")
        if "/formgrader/api/" in r.request.url:  # the scores formgrader's JS asks for
            return r.fulfill(body="[]", content_type="application/json")
        return r.continue_()

    context, page, refused, dialogs, errors = open_page(
        browser, page_url, allowed=formgrader_static, route=serve
    )
    try:
        check_math(page, dialogs, errors, refused)
        assert page.evaluate("MathJax.loaded") is True  # formgrade.js heard typesetting end
    finally:
        context.close()
