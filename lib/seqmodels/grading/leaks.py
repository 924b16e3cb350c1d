"""Searching what students get for what they must not have (used by `seqmodels.grading.release`).

- `course_secrets`: every secret of the problem-set sources of one commit: nbgrader's region
  markers; each line of at least `MIN_LINE` characters inside a solution, hidden-test or
  mark-scheme region, or in a whole answer cell (a model answer), or in a worked solution of the
  instructor's edition (``book/instructor/``: a ``{solution}`` body), that students do not have
  anyway (a line the task's instructions, the library or a chapter also holds is none); the bytes
  of every reference file and the digests of its manifest.
- `find_secrets`: every file of folders and archives (archives inside them too) read for those
  secrets — in a notebook's cells and outputs, a page's text without its tags, a script's strings
  with their escapes undone, wherever a line stands — and for paths only the instructor has.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[3]
MIN_LINE = 25  # characters: a shorter secret line could be any line of code

MARKERS = {
    "BEGIN SOLUTION": "a solution marker",
    "END SOLUTION": "a solution marker",
    "BEGIN HIDDEN TESTS": "a hidden-tests marker",
    "END HIDDEN TESTS": "a hidden-tests marker",
    "BEGIN MARK SCHEME": "a mark-scheme (rubric) marker",
    "END MARK SCHEME": "a mark-scheme (rubric) marker",
}
#: (begin, end, what) of the regions whose lines are secret
REGIONS = [
    ("BEGIN SOLUTION", "END SOLUTION", "solution"),
    ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hidden test"),
    ("BEGIN MARK SCHEME", "END MARK SCHEME", "mark scheme"),
]
#: path components that only the instructor's repository has
FORBIDDEN_PARTS = {
    "solutions": "the problem-set sources",
    "references": "reference outputs",
    "nbgrader_config.py": "the grader's configuration",
    "gradebook.db": "the gradebook",
}
#: top-level folders of the instructor's repository that never ship
FORBIDDEN_TOP = {"tests", "grading", "benchmarks", "downloaded", ".ci"}


# ---------------------------------------------------------------------------- git
def git(*args: str, cwd: Path = ROOT, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, **kw)


def tracked_files(ref: str) -> list[str]:
    out = git("ls-tree", "-r", "-z", "--name-only", ref).stdout.decode()
    return [p for p in out.split("\0") if p]


def blobs(ref: str, paths: list[str]) -> dict[str, bytes]:
    """The contents of `paths` at commit `ref` (one ``git archive``)."""
    if not paths:
        return {}
    data = git("archive", "--format=tar", ref, "--", *paths).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}


# ---------------------------------------------------------------------------- secrets
def _normal(line: str) -> str:
    return " ".join(line.split())


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


@dataclass
class Secrets:
    """What must never reach a student, from the problem-set sources of one commit."""

    lines: dict[str, tuple[str, str]] = field(default_factory=dict)  # line -> (kind, where)
    blobs: dict[str, str] = field(default_factory=dict)  # SHA-256 of a file -> which file
    digests: dict[str, str] = field(default_factory=dict)  # a manifest's hex digest -> which
    markers: dict[str, str] = field(default_factory=lambda: dict(MARKERS))
    dropped: int = 0  # lines of secret regions left out: the same line is public (see below)
    _pattern: re.Pattern | None = field(default=None, repr=False, compare=False)

    def pattern(self) -> re.Pattern:
        """One regular expression that finds any line, marker or digest anywhere in a text (a
        trie of them: ~15 MB/s however many lines there are)."""
        if self._pattern is None:
            self._pattern = re.compile(_trie_regex([*self.lines, *self.markers, *self.digests]))
        return self._pattern

    def what(self, text: str) -> str:
        if text in self.lines:
            kind, where = self.lines[text]
            return f"a {kind} line of {where}: {text[:60]!r}"
        if text in self.markers:
            return f"{self.markers[text]} ({text!r})"
        return f"a digest of {self.digests[text]}"

    def without(self, kind: str) -> Secrets:
        """The same secrets less the lines of one kind (the solutions released after a deadline)."""
        lines = {line: v for line, v in self.lines.items() if v[0] != kind}
        return Secrets(lines, self.blobs, self.digests, dict(self.markers), self.dropped)


def _trie_regex(words: list[str]) -> str:
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def walk(node: dict) -> str:
        alternatives = []
        for c, child in sorted(node.items()):
            if not c:
                continue
            run = [c]  # a chain of single children is one literal: recursion only at branches
            while len(child) == 1 and "" not in child:
                ((c, child),) = child.items()
                run.append(c)
            alternatives.append(re.escape("".join(run)) + walk(child))
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"
        return f"(?:{body})?" if "" in node else body

    return walk(trie) if words else r"(?!)"


def cell_lines(cell: dict) -> list[tuple[str, str | None]]:
    """Each line of a source cell with what it is: None (what students see), "marker", or the
    kind of secret: "solution" (an autograded answer), "model answer" (the answer of a manually
    graded cell), "hidden test" or "mark scheme"."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    lines = _source(cell).splitlines()
    answer = "model answer" if meta.get("grade") else "solution"
    if meta.get("solution") and not any(r[0] in line for line in lines for r in REGIONS):
        return [(line, answer) for line in lines]  # nbgrader replaces the whole cell
    out: list[tuple[str, str | None]] = []
    inside: str | None = None
    for line in lines:
        if any(r[0] in line for r in REGIONS):
            inside = next(r[2] for r in REGIONS if r[0] in line)
            out.append((line, "marker"))
        elif any(r[1] in line for r in REGIONS):
            inside = None
            out.append((line, "marker"))
        else:
            kind = answer if inside == "solution" else inside
            out.append((line, kind))
    return out


def notebook_secrets(notebook: dict, name: str) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """The secret lines of one source notebook (normalized line -> (kind, where)), and its public
    lines (those outside every region, and any stored output)."""
    secret: dict[str, tuple[str, str]] = {}
    public: set[str] = set()
    for index, cell in enumerate(notebook["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        where = f"{name} cell {index} ({meta.get('grade_id', cell['cell_type'])})"
        for line, kind in cell_lines(cell):
            if kind is None:
                public.add(_normal(line))
            elif kind != "marker" and len(_normal(line)) >= MIN_LINE:
                secret.setdefault(_normal(line), (kind, where))
        for output in cell.get("outputs", []):
            public.update(_normal(t) for t in _output_text(output).splitlines())
    return secret, public


SOLUTION_OPEN = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{solution(?P<start>-start)?\}")
SOLUTION_END = re.compile(r"^\s*(`{3,}|:{3,})\{solution-end\}")


def worked_solution_lines(source: str) -> list[str]:
    """The lines of every worked solution of a MyST page: the body of each ``{solution}``
    directive, and everything between ``{solution-start}`` and ``{solution-end}`` (code cells
    too)."""
    lines = source.splitlines()
    found: list[str] = []
    i = 0
    while i < len(lines):
        opening = SOLUTION_OPEN.match(lines[i])
        i += 1
        if not opening:
            continue
        fence = opening["fence"]
        while i < len(lines):
            line = lines[i]
            i += 1
            if opening["start"] and SOLUTION_END.match(line):
                break
            if not opening["start"] and line.strip() == fence[0] * len(line.strip()):
                if len(line.strip()) >= len(fence):  # the directive's own closing fence
                    break
            found.append(line)
    return found


def course_secrets(
    ref: str = "HEAD", public: Callable[[str], bool] = lambda path: False
) -> Secrets:
    """Every secret of the problem-set sources of commit `ref` (``solutions/<ps>/``); a line that
    is also in a file for which `public` is true (what students have anyway) is none."""
    secrets = Secrets()
    files = tracked_files(ref)
    public_code = [p for p in files if public(p)]
    worked = [p for p in files if p.startswith("book/instructor/") and p.endswith(".md")]
    contents = blobs(ref, public_code + worked + [p for p in files if p.startswith("solutions/")])
    # what students have anyway: the library, the chapters, and every source notebook outside its
    # regions (a task's instructions may quote a line of its solution)
    public = [_normal(line) for p in public_code for line in contents[p].decode().splitlines()]
    candidates: dict[str, tuple[str, str]] = {}
    for path in worked:  # the instructor's edition: each exercise's worked solution
        for line in worked_solution_lines(contents[path].decode()):
            if len(_normal(line)) >= MIN_LINE:
                candidates.setdefault(_normal(line), ("worked solution", path))
    for path in files:
        parts = PurePosixPath(path).parts
        if parts[0] != "solutions":
            continue
        data = contents[path]
        if "references" in parts:
            secrets.blobs[hashlib.sha256(data).hexdigest()] = path
            if path.endswith(".json"):
                for key, value in json.loads(data).items():
                    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40,}", value):
                        secrets.digests[value] = f"{path} ({key})"
        elif len(parts) == 3 and parts[2] == f"{parts[1]}.ipynb":
            secret, seen = notebook_secrets(json.loads(data), parts[1])
            public.extend(seen)
            for line, where in secret.items():
                candidates.setdefault(line, where)
    # a secret line found anywhere in that text (overlapping matches too) gives nothing away
    pattern = re.compile(f"(?=({_trie_regex(list(candidates))}))")
    found = {m[1] for m in pattern.finditer("\n".join(public))}
    secrets.lines = {line: where for line, where in candidates.items() if line not in found}
    secrets.dropped = len(candidates) - len(secrets.lines)
    return secrets


# ---------------------------------------------------------------------------- searching
def _output_text(output: dict) -> str:
    parts = []
    if "text" in output:
        parts.append(_source({"source": output["text"]}))
    for key in ("ename", "evalue"):
        parts.append(str(output.get(key, "")))
    parts.extend(output.get("traceback", []))
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/") or mime.endswith("json") or mime.endswith("+xml"):
            parts.append(value if isinstance(value, str) else json.dumps(value))
    return "\n".join(parts)


def text_views(name: str, data: bytes) -> list[str]:
    """The texts in which a secret could show in file `name`: its text, a notebook's cells and
    outputs, a page's text without tags, a script's strings with their escapes undone."""
    if b"\0" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    views = [text]
    if name.endswith(".ipynb"):
        try:
            notebook = json.loads(text)
            for cell in notebook.get("cells", []):
                views.append(_source(cell))
                views.extend(_output_text(o) for o in cell.get("outputs", []))
        except (json.JSONDecodeError, AttributeError, TypeError):
            pass
    if name.endswith((".html", ".htm", ".xml", ".svg")):
        views.append(html.unescape(re.sub(r"<[^>]*>", "", text)))
    if "\\n" in text:
        views.append(text.replace("\\n", "\n").replace('\\"', '"').replace("\\'", "'"))
    return views


@dataclass(frozen=True)
class Finding:
    where: str  # the artifact's file
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def check_file(name: str, data: bytes, secrets: Secrets) -> list[Finding]:
    """What of `secrets` the file `name` (relative to its artifact) gives away."""
    found = []
    parts = PurePosixPath(name).parts
    for part in parts:
        if part in FORBIDDEN_PARTS:
            found.append(Finding(name, f"path of {FORBIDDEN_PARTS[part]} ({part})"))
    if parts and parts[0] in FORBIDDEN_TOP:
        found.append(Finding(name, f"an instructor's folder ({parts[0]}/)"))
    if re.fullmatch(r"ps\d+_\w+\.py", parts[-1] if parts else ""):
        found.append(Finding(name, "a test file of submissions (it reads solutions/)"))
    digest = hashlib.sha256(data).hexdigest()
    if digest in secrets.blobs:
        found.append(Finding(name, f"the bytes of {secrets.blobs[digest]}"))
    seen: set[str] = set()
    for view in text_views(name, data):
        # secret lines are compared with their runs of spaces made one, wherever they stand
        for match in secrets.pattern().finditer(re.sub(r"[^\S\n]+", " ", view)):
            if match[0] not in seen:
                seen.add(match[0])
                found.append(Finding(name, secrets.what(match[0])))
    return found


def artifact_files(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every file of a folder (a repository's .git included: packed objects are
    compressed, so its working files and archive are what is read) or of a .tar.gz/.zip archive,
    archives inside it included."""
    if path.is_dir():
        for file in sorted(path.rglob("*")):
            if file.is_file() and not file.is_symlink():
                relative = file.relative_to(path).as_posix()
                if relative.startswith(".git/objects/"):
                    continue
                data = file.read_bytes()
                yield relative, data
                if relative.endswith((".tar.gz", ".tgz", ".zip")):
                    yield from _members(relative, data)
    elif path.name.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        yield from _members(path.name, path.read_bytes())
    else:
        yield path.name, path.read_bytes()


def _members(name: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    if name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    yield f"{name}!{info.filename}", archive.read(info)
        return
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for member in archive:
            if member.isfile():
                inner = archive.extractfile(member)
                # the archive's own folder (sequence-models-nlp/) is not part of the path checked
                relative = member.name.split("/", 1)[-1]
                yield f"{name}!{relative}", inner.read() if inner else b""


def find_secrets(paths: Iterable[Path], secrets: Secrets) -> tuple[list[Finding], int]:
    """Every finding in the artifacts at `paths` (folders or archives), and how many files were read."""
    findings, files = [], 0
    for path in paths:
        for name, data in artifact_files(path):
            files += 1
            shown = name if "!" in name else f"{path.name}/{name}"
            findings.extend(Finding(shown, f.what) for f in check_file(name, data, secrets))
    return findings, files
