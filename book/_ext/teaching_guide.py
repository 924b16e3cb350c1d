"""The instructor's teaching guide, generated from the sources it describes so it cannot drift.

- ``{rubrics}`` renders every manually graded part of every problem set from
  ``solutions/<ps>/<ps>.ipynb``: its points (the answer cell's nbgrader metadata), its question and
  its rubric (the question cell's ``BEGIN MARK SCHEME`` region, read with
  `seqmodels.grading.leaks.cell_lines`, the parser the release search uses), the model answer in
  a dropdown, and an *estimate* of the TA time per 100 students (`ta_minutes`: the words read
  per answer at a stated reading rate plus a stated time per rubric line; ``:summary:`` gives the
  table of every set's estimate instead).
- ``{wrong-submissions}`` lists the wrong submissions the grading tests hold
  (``tests/<ps>_submissions.py``, read with `ast`, never imported): each one's name, the task it
  targets (the heading above its answer cell), its edit of the solution, and the test case that
  catches it, public or hidden (found in the test cell's ``BEGIN HIDDEN TESTS`` block).
- ``{section-timings}`` tabulates each chapter page's reading time (`claims.reading_minutes`) and
  the seconds it took to execute in this build (`claims.chapter_runtime` of that page alone).
- ``{problem-set-hours}`` tabulates the expected time each set states in its first cell;
  ``{ps-hours}`ps1``` gives one of them in prose.

A manually graded answer without a mark scheme above it, a mark scheme without a rubric, points
in the heading that disagree with the metadata, or a killing case that no test cell names is a
Sphinx warning (``-W`` fails the build): reported, never skipped.

The pages that use these are the instructor's edition's (``book/instructor/guide/``); the
extension is set up from `notebooks.setup` with its siblings (``app.setup_extension``), and
tests/test_teaching_guide.py builds them on a small Sphinx project.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from seqmodels.grading.leaks import cell_lines

logger = logging.getLogger(__name__)

HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")
RUBRIC_START = re.compile(r"^\s*\*\*Rubric\b")
BULLET = re.compile(r"^\s*[-*+]\s+\S")
WORDS_REQUESTED = re.compile(r"(\d+)\s*[–-]\s*(\d+)[-\s]+words")
POINTS_IN_TITLE = re.compile(r"\((\d+(?:\.\d+)?) points?\b")
EXPECTED_TIME = re.compile(r"\*\*Expected time: ([^*]+?)\.?\*\*")
WORD = re.compile(r"\S+")


# ---------------------------------------------------------------------------- rubrics
@dataclass
class ManualPart:
    """One manually graded answer of a problem set, with what its question cell says about it."""

    problem_set: str
    grade_id: str
    points: float
    title: str
    question: str
    model_answer: str
    rubric: str
    rubric_lines: int  # bullets of the rubric: each is a decision the TA makes
    answer_words: int  # the words a TA reads per answer (see `answer_words_source`)
    answer_words_source: str


@dataclass
class Rubrics:
    parts: list[ManualPart] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _question(lines: list[str]) -> tuple[str, str]:
    """(title, body) of a question cell's public text: from its last heading on, which names the
    part (a cell may open with its Part's heading and instructions)."""
    start = max((i for i, line in enumerate(lines) if HEADING.match(line)), default=None)
    if start is None:
        return "", "\n".join(lines).strip()
    return HEADING.match(lines[start])[2], "\n".join(lines[start + 1 :]).strip()


def manual_parts(notebook: dict, problem_set: str) -> Rubrics:
    """Every manually graded answer cell (nbgrader ``grade`` and ``solution``) of a source
    notebook, paired with the mark scheme of the nearest question cell above it."""
    out = Rubrics()
    scheme: tuple[int, list[tuple[str, str | None]]] | None = None
    for index, cell in enumerate(notebook.get("cells", [])):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        lines = cell_lines(cell)
        if meta.get("grade") and meta.get("solution"):
            grade_id = meta.get("grade_id", f"cell {index}")
            where = f"{problem_set} {grade_id} (cell {index})"
            if scheme is None:
                out.problems.append(
                    f"{where}: a manually graded answer with no mark scheme "
                    "(=== BEGIN MARK SCHEME === … === END MARK SCHEME ===) in a cell above it"
                )
                continue
            parsed = _part(problem_set, grade_id, float(meta.get("points", 0)), scheme[1])
            if isinstance(parsed, str):
                out.problems.append(f"{where}: {parsed}")
            else:
                out.parts.append(parsed)
            scheme = None  # each mark scheme serves the one answer below it
        elif any(kind == "mark scheme" for _, kind in lines):
            scheme = (index, lines)
    if not out.parts and not out.problems:
        out.problems.append(
            f"{problem_set}: no manually graded part (no cell has nbgrader's "
            "grade and solution both true)"
        )
    return out


def _part(
    problem_set: str, grade_id: str, points: float, lines: list[tuple[str, str | None]]
) -> ManualPart | str:
    public = [line for line, kind in lines if kind is None]
    scheme = [line for line, kind in lines if kind == "mark scheme"]
    title, question = _question(public)
    start = next((i for i, line in enumerate(scheme) if RUBRIC_START.match(line)), None)
    if start is None:
        return "its mark scheme has no rubric (a line starting **Rubric)"
    model, rubric = "\n".join(scheme[:start]).strip(), "\n".join(scheme[start:]).strip()
    stated = POINTS_IN_TITLE.search(title)
    if stated and float(stated[1]) != points:
        return f"the question says {stated[1]} points, the answer cell's metadata {points:g}"
    requested = WORDS_REQUESTED.search(question)
    if requested:
        words, source = int(requested[2]), f"the most the question asks for ({requested[0]})"
    else:
        words, source = len(WORD.findall(model)), "the model answer's length"
    return ManualPart(
        problem_set,
        grade_id,
        points,
        title or grade_id,
        question,
        model,
        rubric,
        sum(bool(BULLET.match(line)) for line in rubric.splitlines()),
        words,
        source,
    )


def ta_minutes(part: ManualPart, words_per_minute: float, seconds_per_line: float) -> float:
    """An estimate, not a measurement: minutes a TA spends on one answer, reading
    `part.answer_words` at `words_per_minute` and deciding each rubric line in `seconds_per_line`."""
    return part.answer_words / words_per_minute + part.rubric_lines * seconds_per_line / 60


def source_notebooks(root: Path) -> list[tuple[str, Path]]:
    """``(ps, solutions/<ps>/<ps>.ipynb)`` of every problem set, in order (ps2 before ps10)."""
    found = [
        (folder.name, folder / f"{folder.name}.ipynb")
        for folder in Path(root, "solutions").glob("ps*")
        if (folder / f"{folder.name}.ipynb").is_file()
    ]
    return sorted(found, key=lambda item: int(re.sub(r"\D", "", item[0]) or 0))


def _set_title(notebook: dict, fallback: str) -> str:
    for cell in notebook.get("cells", []):
        match = re.search(r"^#\s+(.+)$", _source(cell), re.M)
        if cell.get("cell_type") == "markdown" and match:
            return match[1].strip()
    return fallback


def _hours(x: float) -> str:
    return f"{x:.1f}"


MATH_OR_CODE = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|`+[^`]*`+", re.S)


def for_people(markdown: str) -> str:
    """`markdown` with Python's e-notation written for people (``7.48e-13`` → a power of ten,
    `seqmodels.tables.for_people`, as the book writes every number), outside math and code."""
    from seqmodels.tables import for_people as numbers

    out, last = [], 0
    for match in MATH_OR_CODE.finditer(markdown):
        out += [numbers(markdown[last : match.start()]), match[0]]
        last = match.end()
    return "".join([*out, numbers(markdown[last:])])


class _Generated(SphinxDirective):
    """A directive whose body is MyST text generated here, parsed as the page's own."""

    def parse(self, text: str) -> list[nodes.Node]:
        container = nodes.container(classes=["teaching-guide"])
        self.state.nested_parse(StringList(text.splitlines()), 0, container)
        return [container]

    def warn(self, message: str) -> None:
        logger.warning(message, location=self.get_location(), type="teaching_guide")


class RubricsDirective(_Generated):
    """``{rubrics}`` with ``:words-per-minute:`` and ``:seconds-per-line:`` (the estimate's stated
    assumptions), ``:students:`` (100 unless given), an optional ``:sets: ps1 ps2``, and
    ``:summary:`` for a table of the sets' parts, points and TA time instead of the rubrics."""

    option_spec = {
        "sets": directives.unchanged,
        "words-per-minute": directives.positive_int,
        "seconds-per-line": directives.positive_int,
        "students": directives.positive_int,
        "summary": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        for needed in ("words-per-minute", "seconds-per-line"):
            if needed not in self.options:
                self.warn(f"{{rubrics}} needs :{needed}: (an assumption of the TA-time estimate)")
                return []
        rate, per_line = self.options["words-per-minute"], self.options["seconds-per-line"]
        students = self.options.get("students", 100)
        wanted = set(self.options.get("sets", "").split())
        blocks, table, total = [], [], 0.0
        for ps, path in source_notebooks(Path(self.env.srcdir)):
            if wanted and ps not in wanted:
                continue
            self.env.note_dependency(str(path))
            notebook = json.loads(path.read_text(encoding="utf-8"))
            found = manual_parts(notebook, ps)
            for problem in found.problems:
                self.warn(f"[teaching_guide] {path.relative_to(self.env.srcdir)}: {problem}")
            rows, set_minutes = [], 0.0
            for part in found.parts:
                minutes = ta_minutes(part, rate, per_line)
                set_minutes += minutes
                rows.append(_rubric_block(part, minutes, students))
            total += set_minutes
            points = sum(p.points for p in found.parts)
            hours = _hours(set_minutes * students / 60)
            table.append(
                f"| {_set_title(notebook, ps)} | {len(found.parts)} | {points:g} "
                f"| {set_minutes:.1f} | {hours} |"
            )
            blocks.append(
                f"`solutions/{ps}/{ps}.ipynb`: {len(found.parts)} manually graded parts, "
                f"{points:g} points; estimated TA time {hours} hours per {students} students.\n\n"
                + "\n\n".join(rows)
            )
        if wanted and not blocks:
            self.warn(f"{{rubrics}}: no problem set named {sorted(wanted)} in solutions/")
        if "summary" not in self.options:
            return self.parse("\n\n".join(blocks))
        text = (
            f"TA time is an estimate from countable inputs, not a measurement: the words read per "
            f"answer at {rate} words a minute, plus {per_line} s per rubric line per answer.\n\n"
            f"| problem set | hand-graded parts | points | TA minutes per student "
            f"| TA hours per {students} students |\n|---|---|---|---|---|\n"
            + "\n".join(table)
            + f"\n| all sets | | | {total:.1f} | {_hours(total * students / 60)} |"
        )
        return self.parse(text)


def _rubric_block(part: ManualPart, minutes: float, students: int) -> str:
    fence = "`" * 6
    return f"""\
{fence}{{admonition}} {part.problem_set.upper()} · {part.title}
:class: rubric

**Points:** {part.points:g} (answer cell `{part.grade_id}`). **TA time (estimate):**
{part.answer_words} words read ({part.answer_words_source}) and {part.rubric_lines} rubric lines:
{minutes:.1f} min an answer, {_hours(minutes * students / 60)} h per {students} students.

{for_people(part.question)}

{for_people(part.rubric)}

`````{{dropdown}} Model answer
{for_people(part.model_answer)}
`````
{fence}"""


# ---------------------------------------------------------------------------- wrong submissions
@dataclass
class WrongSubmission:
    name: str
    answer_cell: str
    edits: list[tuple[str, str]]  # (the solution's text, the wrong text); empty: a whole cell
    killed_by: str | None  # the start of the name of a case it fails, as the tests record it
    note: str = ""  # what the file says of it where it says more (PS1's trajectory bugs)


def _constants(tree: ast.Module) -> dict[str, object]:
    """The module's names bound to literals (``PPL, TEST_PPL = "a", "b"`` too)."""
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = node.value.elts if isinstance(target, ast.Tuple) else [node.value]
            for name, value in zip(names, values, strict=True):
                found = _literal(value, out)
                if isinstance(name, ast.Name) and isinstance(found, str):
                    out[name.id] = found
    return out


def _literal(node: ast.AST, constants: dict | None = None):
    """The value of a literal expression whose names are the module's string constants (and
    sums of them); None if it has anything else."""
    constants = constants or {}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(e, constants) for e in node.elts]
        return None if any(i is None for i in items) else tuple(items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {
            _literal(k, constants): _literal(v, constants)
            for k, v in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left, constants), _literal(node.right, constants)
        return left + right if isinstance(left, str) and isinstance(right, str) else None
    return None


def _assigned(tree: ast.Module, name: str) -> ast.AST | None:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node.value
    return None


def wrong_submissions(path: Path) -> list[WrongSubmission]:
    """The wrong submissions a ``tests/<ps>_submissions.py`` holds, read statically: its ``_BUGS``
    (``name → (answer cell, [(right, wrong), …])``) with ``KILLED_BY`` (``name → case``), or
    PS1's ``WRONG`` (``name → (answer cell, code, test cell)``) and the trajectory bugs of
    ``ps1_training_submissions.TRAJECTORY_BUGS`` (``name → (cell, code, test, what kills it)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = _constants(tree)
    bugs, killed = _assigned(tree, "_BUGS"), _assigned(tree, "KILLED_BY")
    out = []
    if isinstance(bugs, ast.Dict):
        killed_by = (_literal(killed, constants) if killed is not None else None) or {}
        for key, value in zip(bugs.keys, bugs.values, strict=True):
            name, cell = _literal(key), _literal(value.elts[0])
            edits = _literal(value.elts[1], constants) or ()
            case = killed_by.get(name)
            if isinstance(case, tuple):  # PS6 records (answer cell, case)
                case = case[-1]
            out.append(WrongSubmission(name, cell, list(edits), case))
        return out
    wrong = _assigned(tree, "WRONG")
    if isinstance(wrong, ast.DictComp) and isinstance(wrong.generators[0].iter, ast.Call):
        listed = wrong.generators[0].iter.func.value  # {...}.items()
        for key, value in zip(listed.keys, listed.values, strict=True):
            cell = _literal(value.elts[0], constants)
            out.append(WrongSubmission(_literal(key), cell, [], None))
    training = path.with_name(path.stem.replace("_submissions", "_training_submissions") + ".py")
    if training.is_file():
        bugs = _assigned(ast.parse(training.read_text(encoding="utf-8")), "TRAJECTORY_BUGS")
        for key, value in zip(bugs.keys, bugs.values, strict=True):
            cell, note = _literal(value.elts[0]), _literal(value.elts[3])
            out.append(WrongSubmission(_literal(key), cell, [], None, note or ""))
    return out


@dataclass(frozen=True)
class Case:
    name: str  # as written in the test cell: an f-string's fields stay ``{…}``
    hidden: bool

    def names(self, prefix: str) -> bool:
        """Whether `prefix` (a case name's start, as the tests record it) names this case."""
        head = self.name.split("{", 1)[0]
        if "{" in self.name:  # an f-string: its literal head, then anything
            return prefix.startswith(head) or head.startswith(prefix)
        return self.name.startswith(prefix)


CASE_CALL = re.compile(r"""\.case\(\s*(?:f?"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')""")


def cases_of(notebook: dict) -> dict[str, list[Case]]:
    """``{test cell's grade_id: [Case, …]}``: the names passed to ``check.case`` in each test cell,
    and whether each sits between ``BEGIN HIDDEN TESTS`` and ``END HIDDEN TESTS``."""
    out: dict[str, list[Case]] = {}
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade"):
            continue
        source = _source(cell)
        hidden_spans = [
            (m.start(), m.end())
            for m in re.finditer(r"BEGIN HIDDEN TESTS.*?(?:END HIDDEN TESTS|\Z)", source, re.S)
        ]
        cases = [
            Case(
                m[1] if m[1] is not None else m[2],
                any(start <= m.start() < end for start, end in hidden_spans),
            )
            for m in CASE_CALL.finditer(source)
        ]
        out[meta.get("grade_id", "")] = cases
    return out


def task_headings(notebook: dict) -> dict[str, str]:
    """``{answer cell's grade_id: the last task heading above it}`` (``## Task 4 — …``)."""
    out, heading = {}, ""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                match = HEADING.match(line)
                if match and re.match(r"(Task|Part)\b", match[2]):
                    heading = match[2]
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and "grade_id" in meta:
            out[meta["grade_id"]] = heading
    return out


def _answer_to_test(notebook: dict) -> dict[str, str]:
    """``{answer cell: the first graded test cell after it}``."""
    out, waiting = {}, []
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            waiting.append(meta.get("grade_id", ""))
        elif meta.get("grade") and cell.get("cell_type") == "code":
            out.update({answer: meta.get("grade_id", "") for answer in waiting})
            waiting = []
    return out


def _code(text: str) -> str:
    """Code in a table cell: one line, its pipes escaped."""
    text = " ".join(text.split()).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


class WrongSubmissionsDirective(_Generated):
    """``{wrong-submissions} ps2``: the set's wrong submissions, task by task."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        ps = self.arguments[0]
        root = Path(self.env.srcdir)
        tests, source = root / "tests" / f"{ps}_submissions.py", root / "solutions" / ps
        notebook_path = source / f"{ps}.ipynb"
        if not tests.is_file() or not notebook_path.is_file():
            self.warn(f"[teaching_guide] {{wrong-submissions}} {ps}: no {tests} or {notebook_path}")
            return []
        for path in (tests, notebook_path, tests.with_name(f"{ps}_training_submissions.py")):
            if path.is_file():
                self.env.note_dependency(str(path))
        notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
        cases, headings = cases_of(notebook), task_headings(notebook)
        test_of = _answer_to_test(notebook)
        rows, hidden = [], 0
        for wrong in wrong_submissions(tests):
            test = test_of.get(wrong.answer_cell)
            if test is None:
                self.warn(f"[teaching_guide] {ps} {wrong.name}: no answer cell {wrong.answer_cell}")
                continue
            caught = "the test cell (its file names no single case)"
            if wrong.note:
                caught = wrong.note
            if wrong.killed_by:
                case = next((c for c in cases[test] if c.names(wrong.killed_by)), None)
                if case is None:
                    self.warn(
                        f"[teaching_guide] {ps} {wrong.name}: no case of {test} starts with "
                        f"{wrong.killed_by!r} (KILLED_BY is out of date)"
                    )
                    continue
                shown = wrong.killed_by if "{" in case.name else case.name
                caught = f"{'hidden' if case.hidden else 'public'}: {_code(_strip_hidden(shown))}"
                hidden += case.hidden
            edit = "; ".join(
                f"{_code(r)} → {_code(w) if w.strip() else '(deleted)'}" for r, w in wrong.edits
            )
            edit = edit or "a whole answer cell (see the file)"
            task = headings.get(wrong.answer_cell, "") or wrong.answer_cell
            rows.append(f"| `{wrong.name}` | {task} | {edit} | `{test}` — {caught} |")
        recorded = sum(" — hidden: " in r or " — public: " in r for r in rows)
        if recorded:
            summary = (
                f"{hidden} of the {recorded} whose catching case the file records are caught by "
                "a hidden case"
            )
        else:
            summary = "the file records the test cell of each, not the case that catches it"
        text = (
            f"{len(rows)} wrong submissions in `tests/{ps}_submissions.py`; {summary}.\n\n"
            "| submission | task | its edit of the solution | caught by |\n|---|---|---|---|\n"
            + "\n".join(rows)
        )
        return self.parse(text)


def _strip_hidden(name: str) -> str:
    return name.removeprefix("hidden: ")


# ---------------------------------------------------------------------------- timings
class section_runtime_pending(nodes.Inline, nodes.TextElement):  # noqa: N801 - docutils' style
    """A page's execution time, filled in once every page has executed (pickled with the doctree)."""


class SectionTimingsDirective(_Generated):
    """``{section-timings}``: every chapter page, its prose words, reading and running time."""

    def run(self) -> list[nodes.Node]:
        from chapters import chapter_pages
        from claims import prose_words, reading_minutes

        root = Path(self.env.srcdir)
        table = nodes.table(classes=["section-timings"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (50, 15, 15, 20):
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        group += [head, body]
        head += _row(["page", "prose words", "reading", "running (this build)"])
        for landing, pages in chapter_pages(root).items():
            for page in pages:
                path = root / f"{page}.md"
                if not path.is_file():
                    continue
                self.env.note_dependency(str(path))
                source = path.read_text(encoding="utf-8")
                link = self._doc_link(page)
                pending = section_runtime_pending("", "", landing=landing, page=page)
                row = _row(
                    [
                        link,
                        str(prose_words(source)),
                        f"about {reading_minutes(source)} min",
                        pending,
                    ]
                )
                body += row
        return [table]

    def _doc_link(self, page: str) -> nodes.Node:
        from sphinx.addnodes import pending_xref

        ref = pending_xref(
            "", refdomain="std", reftype="doc", reftarget=f"/{page}", refexplicit=False
        )
        ref += nodes.inline(page, page)
        paragraph = nodes.paragraph()
        paragraph += ref
        return paragraph


def _row(cells: list) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        if isinstance(cell, str):
            entry += nodes.paragraph(cell, cell)
        elif isinstance(cell, nodes.paragraph):
            entry += cell
        else:
            paragraph = nodes.paragraph()
            paragraph += cell
            entry += paragraph
        row += entry
    return row


def _fill_section_runtimes(app, doctree, docname) -> None:
    from claims import chapter_runtime

    folder = Path(app.outdir).parent / "jupyter_execute"
    for node in list(doctree.findall(section_runtime_pending)):
        seconds = chapter_runtime(folder, node["landing"], [node["page"]])
        if seconds is None:
            logger.warning(
                f"{{section-timings}}: {node['page']} recorded no runtime in this build",
                location=docname,
                type="teaching_guide",
            )
            text = "not recorded"
        else:
            text = f"{seconds:.1f} s"
        node.replace_self(nodes.Text(text))


# ---------------------------------------------------------------------------- hours per set
def expected_time(notebook: dict) -> str | None:
    """What a set's first cells state as its expected time ("about 8 hours"), or None."""
    for cell in notebook.get("cells", [])[:3]:
        match = EXPECTED_TIME.search(_source(cell))
        if match:
            return match[1].strip()
    return None


def _stated_hours(root: Path, ps: str) -> tuple[str | None, Path]:
    path = Path(root) / "solutions" / ps / f"{ps}.ipynb"
    if not path.is_file():
        return None, path
    return expected_time(json.loads(path.read_text(encoding="utf-8"))), path


class ProblemSetHoursDirective(_Generated):
    """``{problem-set-hours}``: each set's stated expected time, and the sentence's source."""

    def run(self) -> list[nodes.Node]:
        root = Path(self.env.srcdir)
        rows = []
        for ps, path in source_notebooks(root):
            self.env.note_dependency(str(path))
            notebook = json.loads(path.read_text(encoding="utf-8"))
            stated = expected_time(notebook)
            if stated is None:
                self.warn(f"[teaching_guide] {ps}: its first cells state no **Expected time: …**")
                stated = "not stated"
            measured = "no" if "not a measurement" in _source(notebook["cells"][0]) else "see set"
            rows.append(
                f"| {_set_title(notebook, ps)} | {stated} | {measured} | `solutions/{ps}/{ps}.ipynb` |"
            )
        return self.parse(
            "| problem set | expected time (as the set states it) | measured with students? "
            "| source |\n|---|---|---|---|\n" + "\n".join(rows)
        )


def _ps_hours_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    stated, path = _stated_hours(Path(env.srcdir), text.strip())
    if stated is None:
        message = inliner.reporter.warning(f"{{ps-hours}}: {path} states no expected time")
        return [nodes.Text("?")], [message]
    env.note_dependency(str(path))
    return [nodes.Text(stated)], []


def setup(app) -> dict:
    app.add_directive("rubrics", RubricsDirective)
    app.add_directive("wrong-submissions", WrongSubmissionsDirective)
    app.add_directive("section-timings", SectionTimingsDirective)
    app.add_directive("problem-set-hours", ProblemSetHoursDirective)
    app.add_role("ps-hours", _ps_hours_role)
    app.add_node(section_runtime_pending)
    app.connect("doctree-resolved", _fill_section_runtimes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
