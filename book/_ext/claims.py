"""Numbers in a chapter's prose are claims: each is glued from execution or declared a constant.

Two checks, run on every build (``-W`` turns each finding into a failed build):

- **Stray numbers.** `stray_numbers` lists every digit-bearing token in a chapter's prose — text,
  headings, table cells, admonitions, figure captions and alt text — that is not glued
  (``{glue:text}``), not in math or code, and not declared a constant with ``{const}`2013```.
  Names that contain digits (``float64``, ``G2P``, ``T5``), ordered-list markers and references to
  the book's own structure (``Chapter 4``, ``Table 4.1``, ``Problem Set 2``) are not numbers about
  results and pass.
- **Asserted claims.** A sentence that compares or quantifies a computed value ("larger", "never",
  "one in four") has a ``claim(name, holds, sentence)`` call (`seqmodels.glue.claim`) in a code cell
  tagged ``remove-cell`` and ``claim`` beside it: a re-run that makes it false stops the chapter's
  execution, so the build fails. `claims_report` lists each chapter's claims from the glue
  ``claim(...)`` records, and the build writes it to ``_build/claims.md``; every claim cell must have
  left its records.

- **Pages read in one sitting.** A chapter is a landing page and its subpages (`chapters`); a page
  whose prose is over `MAX_PAGE_WORDS` words (`prose_words`) fails the build.

Two roles serve the chapters' opening boxes: ``{reading-time}`prose``` is the page's reading time
and ``{reading-time}`chapter``` its chapter's (every page's prose together), `reading_minutes`,
counted from the prose (`prose_lines`: text, tables, captions; not code or math) at
`WORDS_PER_MINUTE`, so they follow every edit. ``{chapter-runtime}`.0f``` is the seconds every page
of the chapter took to execute in this build (`chapter_runtime`: each page's ``chN_runtime`` glue).

Nothing above imports Sphinx (only docutils' node classes), so the rules are unit-testable;
`setup` wires them into the build.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from docutils import nodes

FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
OPTION = re.compile(r"^\s*:(?P<name>[\w-]+):(?P<value>.*)$")
LABEL = re.compile(r"^\s*\([^)\s]+\)=\s*$")
# directives whose argument is a label, not a title (sphinx-exercise's solutions name an exercise)
LABEL_ARGUMENT = {"solution", "solution-start"}
# Roles (glued values, citations, cross-references, declared constants), inline code, inline math
INLINE_EXEMPT = re.compile(
    r"\{[a-zA-Z][\w:.-]*\}`[^`]*`|`+[^`]+?`+|\$\$[^$]+?\$\$|(?<![\\$])\$(?:[^$\n]|\n(?!\s*\n))+?\$"
)
LINK_TARGET = re.compile(r"\]\([^)\s]*\)|<https?://[^>\s]+>|https?://\S+")
COMMENT = re.compile(r"<!--.*?-->|^\s*%.*$", re.S | re.M)
LIST_MARKER = re.compile(r"^(\s*(?:[-*+>]\s+)*)\d+[.)](?=\s)")
_N = r"\d+(?:\.\d+)*(?:'s)?"
STRUCTURE = re.compile(
    r"\b(?:Chapters?|Parts?|Problem Sets?|PS|Tables?|Figures?|Fig\.|Sections?|Exercises?|"
    r"Equations?|Eq\.|Tasks?|Appendix)\s+" + _N + r"(?:\s*(?:,|and|or|–|-|to)\s*" + _N + r")*"
)
# a digit inside a name: float64, G2P, T5, w_3, h2, and names with a capital before a hyphen and
# digits, such as a paper's RNNsearch-50 or GPT-2
IDENTIFIER = re.compile(
    r"(?<![\w.,-])(?:[A-Za-z][A-Za-z_]*\d[\w]*|[A-Za-z]*[A-Z][A-Za-z]*-\d+(?:'s)?)(?![\w-])"
)
TOKEN = re.compile(r"\S*\d\S*")
# a reading rate for technical prose with equations (silent reading of expository text is about
# 240 words a minute; the pages' math and figures slow it), stated on the intro page
WORDS_PER_MINUTE = 150
MAX_PAGE_WORDS = 2500  # a page read in one sitting: about 17 minutes at WORDS_PER_MINUTE
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


@dataclass(frozen=True)
class Stray:
    line: int  # 1-based line in the chapter's source
    token: str
    text: str  # the prose line, exempt parts removed


def prose_lines(source: str) -> list[tuple[int, str]]:
    """The lines of a MyST notebook that a reader reads as prose, with their 1-based numbers.

    Dropped: the YAML header, code cells and code blocks, display math, labels, comments and
    directive options except ``:alt:`` (alt text is prose). Kept: text, headings, tables,
    admonition and figure bodies (captions).
    """
    lines = source.split("\n")
    start = 0
    if lines and lines[0].strip() == "---":
        start = lines.index("---", 1) + 1 if "---" in lines[1:] else len(lines)
    out: list[tuple[int, str]] = []
    fences: list[tuple[str, bool]] = []  # (fence, is_prose) of each open block
    in_math = False
    for number in range(start, len(lines)):
        line = lines[number]
        stripped = line.strip()
        match = FENCE.match(line)
        if match and fences and _closes(match, fences[-1][0]):
            fences.pop()
            continue
        if fences and not fences[-1][1]:
            continue
        if match:
            info = match["info"].strip()
            prose = info.startswith("{") and not re.match(r"\{(code|math|raw)", info)
            fences.append((match["fence"], prose))
            name, _, title = info[1:].partition("}")
            if prose and title.strip() and name not in LABEL_ARGUMENT:
                out.append((number + 1, title))  # a directive's title
            continue
        if in_math or stripped.startswith("$$"):
            ends = stripped.count("$$") % 2 == 1 if not in_math else "$$" in stripped
            if stripped.startswith("$$") and not in_math:
                in_math = stripped.count("$$") == 1
            elif ends:
                in_math = False
            continue
        if LABEL.match(line):
            continue
        option = OPTION.match(line)
        if fences and option:
            if option["name"] == "alt":
                out.append((number + 1, option["value"]))
            continue
        out.append((number + 1, line))
    return out


def _closes(match: re.Match, fence: str) -> bool:
    closing = match["fence"]
    return closing[0] == fence[0] and len(closing) >= len(fence) and not match["info"].strip()


def stray_numbers(source: str) -> list[Stray]:
    """Every digit-bearing token of the prose that is neither glued, nor code or math, nor declared."""
    source = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), source)
    kept = dict(prose_lines(source))
    # one text with a blank line for every line that is not prose, so that inline math and roles
    # that wrap onto the next line are found whole and line numbers stay right
    text = "\n".join(kept.get(n, "") for n in range(1, source.count("\n") + 2))
    text = INLINE_EXEMPT.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = LINK_TARGET.sub("]", line)
        line = LIST_MARKER.sub(r"\1", line)
        line = STRUCTURE.sub(" ", line)
        line = IDENTIFIER.sub(" ", line)
        for token in TOKEN.findall(line):
            found.append(Stray(number, token, line.strip()))
    return found


CLAIM_PREFIX = "claim-"


HINT = re.compile(r"^\s*(?P<fence>:{3,}|`{3,})\{dropdown\}\s+Hint\s*$")


def without_hints(source: str) -> str:
    """`source` with the body of each exercise's hint (a closed ``{dropdown} Hint``, read only by a
    student who is stuck on that exercise) blanked, line numbers kept."""
    lines = source.split("\n")
    fence = None
    for i, line in enumerate(lines):
        if fence is None:
            if m := HINT.match(line):
                fence, lines[i] = m["fence"], ""
        else:
            if line.strip() == fence:
                fence = None
            lines[i] = ""
    return "\n".join(lines)


def prose_words(source: str) -> int:
    """The words a reader reads in a page's prose (`prose_lines`, roles and links reduced to their
    words; the exercises' hints, folded away, are not read in the sitting): what
    `reading_minutes` and the build's `MAX_PAGE_WORDS` count."""
    words = 0
    for _, line in prose_lines(without_hints(source)):
        text = re.sub(r"\{[a-zA-Z][\w:.-]*\}`([^`<]*)(?:<[^`]*>)?`", r"\1", COMMENT.sub("", line))
        words += len(WORD.findall(LINK_TARGET.sub("", text)))
    return words


def reading_minutes(*sources: str) -> int:
    """Minutes to read the prose of one page, or of a chapter's pages together (`prose_words`) at
    `WORDS_PER_MINUTE`, rounded up to the next 5 minutes (at least 5)."""
    words = sum(prose_words(source) for source in sources)
    return max(5, 5 * -(-words // (5 * WORDS_PER_MINUTE)))


def chapter_runtime(glue_folder: Path, landing: str, pages) -> float | None:
    """Seconds the chapter's pages took to execute: the sum of each page's ``chN_runtime`` glue
    (``<glue_folder>/<page>.glue.json``), or None if a page has not recorded one."""
    key = f"ch{int(Path(landing).name[2:4])}_runtime"
    total = 0.0
    for page in pages:
        glue_file = Path(glue_folder) / f"{page}.glue.json"
        glue = json.loads(glue_file.read_text(encoding="utf-8")) if glue_file.is_file() else {}
        value = glue.get(key, {}).get("data", {}).get("text/plain")
        if value is None:
            return None
        total += float(value)
    return total


def claim_cells(source: str) -> int:
    """How many code cells of a MyST notebook are tagged ``claim``."""
    return len(re.findall(r"^```\{code-cell\}[^\n]*\n(?::tags:[^\n]*\bclaim\b)", source, re.M))


def claims_of(glue: dict) -> dict[str, str]:
    """``{name: sentence}`` of the claims an executed chapter recorded (from its ``.glue.json``)."""
    out = {}
    for key, output in glue.items():
        if key.startswith(CLAIM_PREFIX):
            data = output.get("data", {}) if isinstance(output, dict) else {}
            out[key.removeprefix(CLAIM_PREFIX)] = str(data.get("text/plain", "")).strip("'\"")
    return out


def claims_report(chapters: dict[str, dict[str, str]]) -> str:
    """The Markdown record of every chapter's asserted claims."""
    total = sum(len(c) for c in chapters.values())
    lines = [
        "# Asserted claims",
        "",
        f"Each sentence below is asserted by the executed chapter (`seqmodels.glue.claim`); "
        f"{total} in all. The build fails if a re-run makes one false.",
    ]
    for chapter, claims in chapters.items():
        lines += ["", f"## {chapter} ({len(claims)})", ""]
        lines += [f"- `{name}`: {sentence}" for name, sentence in sorted(claims.items())]
    return "\n".join(lines) + "\n"


GLUE_ROLE = re.compile(r"\{glue(?::\w*)?\}`(?P<content>[^`]+)`")


def glue_keys_used(source: str, own: bool = False) -> set[str]:
    """The glue keys a MyST source reads, in roles, figure directives and alt text; with `own`, only
    those it glues itself (not another page's, ``{glue:text}`page.md::key```)."""
    keys = set()
    for m in GLUE_ROLE.finditer(source):
        if own and "::" in m["content"]:
            continue
        key = m["content"].split("::")[-1]
        keys.add(key.rsplit(":", 1)[0] if ":" in key else key)
    for m in re.finditer(r"^\s*(?:`{3,}|:{3,})\{glue(?::\w+)?\}\s*(\S+)", source, re.M):
        if not (own and "::" in m.group(1)):
            keys.add(m.group(1).split("::")[-1])
    return {k.strip() for k in keys}


def glued_in(notebook) -> dict[str, dict]:
    """``{key: output}`` of every value an executed notebook glued (myst-nb's scrapbook records)."""
    found = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                data = {
                    mime.removeprefix("application/papermill.record/"): value
                    for mime, value in output.get("data", {}).items()
                }
                found[name] = {"data": data}
    return found


def check_chapter(path: Path, execute: bool = False) -> tuple[list[str], list[str]]:
    """What an author sees before a build: ``(problems, report)``. Problems are stray numbers and,
    with `execute`, glue keys without a value; the report lists the claims the run recorded."""
    source = path.read_text(encoding="utf-8")
    problems = [
        f"{path}:{s.line}: number {s.token!r} is neither glued nor a {{const}}: {s.text[:90]}"
        for s in stray_numbers(source)
    ]
    if execute:
        import tempfile

        import jupytext

        from seqmodels.execution_client import SlicedNotebookClient

        notebook = jupytext.reads(source, fmt="md:myst")
        scratch = tempfile.mkdtemp(prefix="claims-check-")  # an empty folder, as the build runs it
        client = SlicedNotebookClient(
            notebook, timeout=600, resources={"metadata": {"path": scratch}}
        )
        executed = Path("_build") / "claims-check" / f"{path.stem}.ipynb"
        executed.parent.mkdir(parents=True, exist_ok=True)
        from seqmodels.glue import BUILD_FLAG

        os.environ[BUILD_FLAG] = "1"  # the kernel enforces the claims, as in the build
        try:
            client.execute()
        finally:  # what ran, for reading the numbers (a failed claim's too)
            import nbformat

            nbformat.write(notebook, executed)
        glued = glued_in(notebook)
        problems += [
            f"{path}: glue key {k!r} has no value"
            for k in sorted(glue_keys_used(source, own=True) - set(glued))
        ]
        claims = claims_of(glued)
        report = [
            f"{path}: {prose_words(source)} prose words, {claim_cells(source)} claim cells, "
            f"{len(claims)} claims recorded"
        ]
        report += [f"  claim {name}: {sentence}" for name, sentence in sorted(claims.items())]
        return problems, report
    return problems, [f"{path}: {prose_words(source)} prose words"]


# -- Sphinx ----------------------------------------------------------------------------------------


def _const_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.Text(text)], []


def _reading_time_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from chapters import chapter_of, chapter_pages

    env = inliner.document.settings.env
    root = Path(env.srcdir)
    pages = [env.docname]
    if text.strip() == "chapter":
        landing = chapter_of(root, env.docname)
        pages = list(chapter_pages(root).get(landing, pages))
    sources = [(root / f"{page}.md").read_text(encoding="utf-8") for page in pages]
    return [nodes.Text(f"about {reading_minutes(*sources)} min")], []


class chapter_runtime_pending(nodes.Inline, nodes.TextElement):  # noqa: N801 - docutils' style
    """``{chapter-runtime}``: filled in once every page of the chapter has executed (a module-level
    class: Sphinx pickles the doctree that holds it)."""


CHAPTER_RUNTIME_NODE = chapter_runtime_pending


def _chapter_runtime_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    node = CHAPTER_RUNTIME_NODE(rawtext, "", spec=text.strip())
    node.source, node.line = inliner.reporter.get_source_and_line(lineno)
    return [node], []


def _fill_chapter_runtime(app, doctree, docname) -> None:
    """Replace ``{chapter-runtime}`` with the chapter's execution time (read after every page ran)."""
    from chapters import chapter_of, chapter_pages
    from sphinx.util import logging

    root = Path(app.srcdir)
    for node in list(doctree.findall(CHAPTER_RUNTIME_NODE)):
        landing = chapter_of(root, docname)
        seconds = None
        if landing:
            folder = Path(app.outdir).parent / "jupyter_execute"
            seconds = chapter_runtime(folder, landing, chapter_pages(root)[landing])
        if seconds is None:
            logging.getLogger(__name__).warning(
                "{chapter-runtime}: a page of this chapter recorded no chN_runtime",
                location=node,
                type="claims",
            )
            text = "?"
        else:
            text = format_glue(str(seconds), node["spec"]) if node["spec"] else f"{seconds:.0f}"
        node.replace_self(nodes.inline(text, text, classes=["pasted-text"]))


def _landing_follows_its_pages(app, env, added, changed, removed) -> list[str]:
    """A chapter's landing page states the chapter's reading and running time: re-read it whenever
    one of its pages is re-read (or re-executed for the library's sake, `execution_cache`)."""
    from chapters import chapter_pages

    touched = set(added) | set(changed) | getattr(app, "seqmodels_changed_chapters", set())
    return sorted(
        landing
        for landing, pages in chapter_pages(Path(app.srcdir)).items()
        if touched & set(pages) and landing in env.found_docs
    )


def _people_in_pasted_glue(app, doctree, docname) -> None:
    """Glue pasted from another page (``{glue:text}`page.md::key```, resolved after reading) is
    written for people too, as `format_glue` writes this page's."""
    from seqmodels.tables import for_people

    for node in list(doctree.findall(nodes.inline)):
        if "pasted-text" in node["classes"] and len(node.children) == 1:
            text = node.astext()
            if for_people(text) != text:
                node.children[0].parent = None
                node.children = []
                node += nodes.Text(for_people(text))


def _check(app, env) -> None:
    from chapters import all_pages
    from editions import edition, instructor_pages
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    root = Path(app.srcdir)
    records = {}
    pages = all_pages(root) + (instructor_pages(root) if edition() == "instructor" else [])
    for docname in pages:
        path = root / f"{docname}.md"
        if docname not in env.found_docs or not path.is_file():
            continue
        source = path.read_text(encoding="utf-8")
        for stray in stray_numbers(source):
            logger.warning(
                f"number {stray.token!r} in prose is neither glued nor a {{const}}: {stray.text[:100]}",
                location=(docname, stray.line),
                type="claims",
                subtype="number",
            )
        words = prose_words(source)
        if words > MAX_PAGE_WORDS:
            logger.warning(
                f"{words} prose words: a page is read in one sitting, at most {MAX_PAGE_WORDS} "
                "(split it, or move a section to another page of the chapter)",
                location=docname,
                type="claims",
                subtype="length",
            )
        glue_file = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.glue.json"
        glue = json.loads(glue_file.read_text(encoding="utf-8")) if glue_file.is_file() else {}
        claims = claims_of(glue)
        cells = claim_cells(source)
        if cells and not claims:
            logger.warning(
                f"{cells} cells are tagged 'claim' but the executed page recorded no claim",
                location=docname,
                type="claims",
            )
        records[docname.removeprefix("book/")] = claims
    report = Path(app.outdir).parent / "claims.md"
    report.write_text(claims_report(records), encoding="utf-8")


def format_glue(text_plain: str, spec: str) -> str:
    """A glued value as the page shows it: myst-nb's formatting with `spec`, then written for people
    (`seqmodels.tables.for_people`: no e-notation, no raw ``inf``)."""
    from myst_nb.core.variables import format_plain_text

    from seqmodels.tables import for_people

    return for_people(format_plain_text(text_plain, spec))


def _glue_text_role():
    """myst-nb's ``{glue:text}`` role, its text written for people (as `format_glue` writes it)."""
    from myst_nb.ext.glue.roles import PasteTextRole

    from seqmodels.tables import for_people

    class GlueTextForPeople(PasteTextRole):
        def run(self):
            # myst-nb splits the format spec off at the last colon, so ``page.md::key`` with no
            # spec would lose its "::"; its default spec ("s") keeps the text as it is
            page, separator, key = self.text.partition("::")
            if separator and ":" not in key:
                self.text = f"{self.text}:s"
            found, messages = super().run()
            for i, node in enumerate(found):
                if isinstance(node, nodes.inline) and "pasted-text" in node["classes"]:
                    text = for_people(node.astext())
                    found[i] = nodes.inline(text, text, classes=node["classes"])
                    found[i].source, found[i].line = node.source, node.line
            return found, messages

    return GlueTextForPeople()


def _alt_text(app, doctree, docname) -> None:
    """Glued values in alt text: ``:alt:`` is a plain string, so its roles are resolved here."""
    from myst_markdown import Resolved, _inline
    from sphinx.util import logging

    images = [n for n in doctree.findall(nodes.image) if "{glue" in n.get("alt", "")]
    if not images:
        return
    glue_file = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.glue.json"
    glue = json.loads(glue_file.read_text(encoding="utf-8")) if glue_file.is_file() else {}
    res = Resolved(format_glue=format_glue)
    res.glue = {k: v.get("data", {}).get("text/plain", "") for k, v in glue.items()}
    for image in images:
        image["alt"] = _inline(image["alt"], res)
    for problem in res.problems:
        logging.getLogger(__name__).warning(f"alt text: {problem}", location=docname, type="claims")


def setup(app) -> dict:
    # `const` would otherwise resolve to Python's py:const (the default domain's), which the book
    # never uses as a cross-reference
    app.add_role("const", _const_role)
    app.add_role_to_domain("py", "const", _const_role, override=True)
    app.add_role("reading-time", _reading_time_role)
    app.add_role("chapter-runtime", _chapter_runtime_role)
    app.add_node(CHAPTER_RUNTIME_NODE)
    app.connect("env-get-outdated", _landing_follows_its_pages)
    app.connect("doctree-resolved", _fill_chapter_runtime)
    app.connect("doctree-resolved", _people_in_pasted_glue, priority=900)
    app.add_role_to_domain("glue", "text", _glue_text_role(), override=True)
    app.connect("env-check-consistency", _check)
    app.connect("doctree-resolved", _alt_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Check chapters' prose numbers (and claims).")
    parser.add_argument("chapters", nargs="+", type=Path)
    parser.add_argument("--execute", action="store_true", help="also run the chapter: glue, claims")
    args = parser.parse_args()
    problems: list[str] = []
    for chapter in args.chapters:
        found, report = check_chapter(chapter, args.execute)
        problems += found
        print("\n".join(report + found) or f"{chapter}: no stray numbers")
    sys.exit(1 if problems else 0)
