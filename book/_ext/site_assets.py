"""The site on a phone and in search.

- ``static/course.css``: long display equations scroll sideways with a visible scrollbar and a
  shadow where more is hidden, instead of being cut off at the edge of a phone's screen; so do
  wide tables, whose captions `captions_outside_tables` moves above the scrolled box, whole.
- Search: Sphinx's search page fetches each matching page to cut a snippet from it, which fails
  from disk (``file://``: "Failed to fetch") and shows raw LaTeX over HTTP. After the build, the
  text of every page — math turned into plain symbols — is written to ``_static/search-text.js``;
  ``static/course-search.js`` (on the search page only) turns Sphinx's fetch off and adds snippets
  from it. The search index itself leaves math out, so TeX commands (``frac``, ``mathrm``) are not
  search terms.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"

SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε",
    "eta": "η", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ",
    "tau": "τ", "phi": "φ", "varphi": "φ", "psi": "ψ", "omega": "ω", "Gamma": "Γ", "Delta": "Δ",
    "Theta": "Θ", "Lambda": "Λ", "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Omega": "Ω",
    "sum": "Σ", "prod": "∏", "infty": "∞", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
    "ne": "≠", "neq": "≠", "approx": "≈", "mid": "|", "cdot": "·", "times": "×", "dots": "…",
    "ldots": "…", "cdots": "⋯", "in": "∈", "to": "→", "rightarrow": "→", "leftarrow": "←",
    "bullet": "•", "propto": "∝", "sim": "~", "partial": "∂", "nabla": "∇", "odot": "⊙",
    "top": "ᵀ", "lVert": "‖", "rVert": "‖", "langle": "⟨", "rangle": "⟩",
}  # fmt: skip
SPACING = r"\\(?:,|;|:|!| |quad|qquad|left|right|bigl|bigr|Bigl|Bigr|big|Big|displaystyle)"
WRAPPERS = (
    r"\\(?:text|mathrm|mathbf|mathit|mathsf|mathtt|texttt|textbf|textit|operatorname|boldsymbol"
    r"|mathcal|mathbb)\s*"
)


def plain_math(tex: str) -> str:
    """A one-line plain-text rendering of a TeX formula, for search snippets."""
    text = tex.strip()
    for delimiters in (r"^\\\(|\\\)$", r"^\\\[|\\\]$", r"^\$+|\$+$"):
        text = re.sub(delimiters, "", text.strip())
    text = re.sub(r"\\(?:tag|label)\{[^{}]*\}", "", text)
    text = re.sub(r"\\(?:begin|end)\{[^{}]*\}", "", text)
    for _ in range(3):  # nested fractions, one level per pass
        text = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(WRAPPERS + r"\{([^{}]*)\}", r"\1", text)
    text = re.sub(SPACING + r"(?![a-zA-Z])", " ", text)
    text = text.replace("\\\\", "; ").replace("&", "")
    text = re.sub(r"\\([a-zA-Z]+)", lambda m: SYMBOLS.get(m[1], m[1]), text)
    text = re.sub(r"\\(.)", r"\1", text)  # \{ \} \% …
    text = text.replace("{", "").replace("}", "")
    return " ".join(text.split())


def _page_text(html: str) -> dict | None:
    """The text of a page's main content as the search page would read it, math made plain, with
    the [start, end) of each section by id."""
    from bs4 import BeautifulSoup, Comment, NavigableString, Tag

    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one('[role="main"]')
    if main is None:
        return None
    main = main.select_one("article") or main  # not the theme's toolbar above the article
    for junk in main.select(".headerlink, script, style, .eqno"):
        junk.decompose()
    parts: list[str] = []
    sections: dict[str, list[int]] = {}
    length = 0

    def add(text: str) -> None:
        nonlocal length
        text = re.sub(r"\s+", " ", text)
        if text.startswith(" ") and (not parts or parts[-1].endswith(" ")):
            text = text[1:]
        parts.append(text)
        length += len(text)

    def walk(node) -> None:
        if isinstance(node, Comment):
            return
        if isinstance(node, NavigableString):
            add(str(node))
            return
        if not isinstance(node, Tag):
            return
        classes = node.get("class") or []
        if "math" in classes:
            add(" " + plain_math(node.get_text()) + " ")
            return
        ids = [node["id"]] if node.name == "section" and node.get("id") else []
        start = length
        for child in node.children:
            walk(child)
        for section_id in ids:
            sections[section_id] = [start, length]

    walk(main)
    return {"text": "".join(parts), "sections": sections}


def _write_search_text(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    texts = {}
    for docname in sorted(app.env.found_docs):
        page = outdir / f"{docname}.html"
        if page.is_file():
            text = _page_text(page.read_text(encoding="utf-8"))
            if text is not None:
                texts[docname] = text
    script = "window.SEQMODELS_SEARCH_TEXT = " + json.dumps(texts, ensure_ascii=False) + ";\n"
    (outdir / "_static").mkdir(exist_ok=True)
    (outdir / "_static" / "search-text.js").write_text(script, encoding="utf-8")
    logger.info(f"[site_assets] search snippets for {len(texts)} pages")


def _search_page_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file("search-text.js")
        app.add_js_file("course-search.js")


def _index_without_math() -> None:
    from sphinx.search import WordCollector

    if getattr(WordCollector, "_seqmodels_no_math", False):
        return
    visit = WordCollector.dispatch_visit

    def dispatch_visit(self, node):
        if isinstance(node, nodes.math | nodes.math_block):
            raise nodes.SkipNode
        return visit(self, node)

    WordCollector.dispatch_visit = dispatch_visit
    WordCollector._seqmodels_no_math = True


def _add_static(app: Sphinx, config) -> None:
    config.html_static_path = [*config.html_static_path, str(STATIC)]


def captions_outside_tables(body: str) -> str:
    """Each numbered table's caption moved out of the table, above the box the theme lets a wide
    table scroll in (``pst-scrollable-table-container``), so a phone shows the whole caption while
    the table scrolls; the table keeps its caption as its accessible name (``aria-labelledby``)."""
    if "<caption" not in body:
        return body
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body, "html.parser")
    for box in soup.select("div.pst-scrollable-table-container"):
        table = box.find("table", recursive=False)
        caption = table.find("caption", recursive=False) if table else None
        if caption is None:
            continue
        label = f"{table.get('id') or 'table'}-caption"
        figure = soup.new_tag("div", attrs={"class": "course-table"})
        moved = soup.new_tag("div", attrs={"class": "course-table-caption", "id": label})
        for child in list(caption.contents):
            moved.append(child.extract())
        caption.decompose()
        table["aria-labelledby"] = label
        box.wrap(figure)
        box.insert_before(moved)
    return str(soup)


def _tables(app: Sphinx, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = captions_outside_tables(context["body"])


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _add_static)
    app.add_css_file("course.css")
    app.connect("html-page-context", _search_page_scripts)
    app.connect("html-page-context", _tables)
    app.connect("build-finished", _write_search_text)
    _index_without_math()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
