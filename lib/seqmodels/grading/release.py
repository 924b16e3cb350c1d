"""What students get (`make release`), built from an allow-list and searched for every secret.

    _build/release/
      site/                        the built book (_build/html, less its build reports)
      sequence-models-nlp/         the student repository: a fresh git repository, one commit
      sequence-models-nlp.tar.gz   the same files (``git archive``), for students without git

- The repository holds only what `ALLOW` names, taken from one commit of this repository (``HEAD``
  unless told otherwise), less the instructor's modules (`INSTRUCTOR_ONLY`): the released problem
  sets (``assignments/``), the library (``lib/``, with its package data), ``pyproject.toml`` and
  ``requirements.txt``. The chapters come as the notebooks the book's build generates
  (``book/_generated/<chapter>.ipynb`` → ``chapters/``, the files each page offers for download); the
  README is the student's own (`STUDENT_README`). Nothing else exists there: no ``solutions/``, no
  reference outputs, no ``tests/`` (every test file of this repository is the instructor's: it
  grades, builds the book or reads ``solutions/``; the student's checks are the test cells of each
  notebook), no ``nbgrader_config.py``, no grading folder, no history.
- Then every file of the repository, of the archive and of the site is searched for every secret
  of the same commit (`seqmodels.grading.leaks`); a release with any finding is refused.
- ``feedback ps1`` and ``solution ps1``: after a deadline (`seqmodels.grading.after_deadline`).
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

from .leaks import Secrets, find_secrets, git, tracked_files
from .leaks import course_secrets as _course_secrets

ROOT = Path(__file__).resolve().parents[3]
NAME = "sequence-models-nlp"  # the student repository's folder (what `git clone` of it makes)

#: tracked files of the commit that the student repository holds (``*`` within a folder, ``**``
#: across folders); every other file stays with the instructor
ALLOW = [
    "assignments/README.md",
    "assignments/*/*",
    "lib/seqmodels/**.py",
    "lib/seqmodels/results/*.json",
    "lib/seqmodels/results/*.safetensors",
    "pyproject.toml",
    "requirements.txt",
]
#: modules of the library that only the grader runs (the sandbox's list: no kernel needs them) and
#: the release's own; the test cells' `Checker` (``capture``, with ``compare`` and ``rules``) ships.
#: `seqmodels.bytebpe` is what Problem Set 6's Tasks 1-2 ask students to write: the grader encodes
#: held-out text with it, and a student repository without it has nothing to paste
INSTRUCTOR_ONLY = [
    "seqmodels.grading.cluster",
    "seqmodels.grading.kernel_forks",
    "seqmodels.grading.kernel_relay",
    "seqmodels.grading.kernel_zygote",
    "seqmodels.grading.math_pages",
    "seqmodels.grading.preprocessors",
    "seqmodels.grading.references",
    "seqmodels.grading.run",
    "seqmodels.grading.sandbox",
    "seqmodels.grading.worker",
    "seqmodels.grading.release",
    "seqmodels.grading.leaks",
    "seqmodels.grading.after_deadline",
    "seqmodels.grading.similarity",  # running a course: reads every submission
    "seqmodels.grading.policies",  # the late policy and the LMS export (nbgrader plugins)
    "seqmodels.grading.errata",  # the check of a corrected release against the one students have
    "seqmodels.grading.heldout",  # the grader's half of the training tasks (it uses bytebpe)
    "seqmodels.bytebpe",  # the grader's own encoder of Problem Set 6's held-out text: its answer
]
#: what the site leaves behind: Sphinx's error logs of chapters that failed to execute
SITE_SKIP = {"reports"}

STUDENT_README = """\
# Sequence Models for NLP — student repository

The course's chapters as notebooks, its problem sets and the `seqmodels` library they use. The
course's website has the same chapters with their figures and explanations.

## Install (once)

Python 3.11; no GPU needed.

```bash
python3.11 -m venv ~/seqmodels-env
source ~/seqmodels-env/bin/activate
pip install torch==2.13.0                  # the tested build; first, so pip does not pick another
pip install "./{name}[student]"
```

(From inside this folder, `pip install ".[student]"`.) On macOS, on Windows (WSL or PowerShell)
and in Colab, the course website's *Setting up* page gives the same steps.

## Work

- **Chapters:** `jupyter lab chapters/ch01_language_models.ipynb` (or any other in `chapters/`).
- **Problem sets:** `jupyter lab assignments/ps1/ps1.ipynb`. Write your code in the answer cells,
  then *Kernel → Restart Kernel and Run All Cells*. Each test cell prints
  `✓ <task>: public checks passed — hidden checks run at grading`, or names the public checks that
  failed. Hidden checks run only when your notebook is graded. `assignments/README.md` says what
  graded code may use.

## Submit

Upload the notebook itself, **`psN.ipynb`** (for example `assignments/ps1/ps1.ipynb`), under that
name: do not rename it, do not zip it, and do not copy its cells into another notebook (the grader
finds your answers by the cells' ids). Save it after a full *Restart and Run All*.

## After the deadline

Your feedback is a page per problem set, `psN.html`: each task's cases, passed or failed and how,
with the points earned. It comes back where you submitted (on JupyterHub:
`nbgrader fetch_feedback psN` puts it in `psN/feedback/<time>/psN.html`). Worked solutions of the
programming tasks are discussed after the deadline, as the course announces.

Released from the course's repository by `make release`; this repository has one commit, and a new
release replaces it (clone it again, or download the new archive, and copy your notebooks over).
"""

STUDENT_GITIGNORE = """\
.ipynb_checkpoints/
__pycache__/
*.egg-info/
"""


# ---------------------------------------------------------------------------- what ships
def _glob_regex(pattern: str) -> re.Pattern:
    out = ""
    for part in re.split(r"(\*\*|\*)", pattern):
        out += {"**": ".*", "*": "[^/]*"}.get(part, re.escape(part))
    return re.compile(out + r"\Z")


def allowed(path: str) -> bool:
    """Whether the tracked file `path` belongs in the student repository."""
    if not any(_glob_regex(p).match(path) for p in ALLOW):
        return False
    if path.startswith("lib/") and path.endswith(".py"):
        module = path.removeprefix("lib/").removesuffix(".py").replace("/", ".")
        module = module.removesuffix(".__init__")
        if any(module == m or module.startswith(m + ".") for m in INSTRUCTOR_ONLY):
            return False
    return True


def dirty_inputs() -> list[str]:
    """Uncommitted changes (and untracked files) among what a release is built from."""
    paths = ["assignments", "lib", "book", "solutions", "_config.yml", "_toc.yml"]
    out = git("status", "--porcelain", "--", *paths).stdout.decode()
    return [line[3:] for line in out.splitlines() if line.strip()]


def course_secrets(ref: str = "HEAD") -> Secrets:
    """The secrets of commit `ref`, less what a student has anyway: the released library's code
    and the chapters' pages (not the instructor's edition, ``book/instructor/``)."""
    return _course_secrets(
        ref,
        lambda p: (
            (allowed(p) and p.endswith(".py"))
            or bool(re.fullmatch(r"book/(?!instructor/)(?:[^/]+/)?[^/]+\.md", p))
        ),
    )


# ---------------------------------------------------------------------------- building
def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """The chapter notebooks the book's build generated, one per chapter; raises if any is missing
    or older than its chapter."""
    notebooks = []
    for chapter in sorted((root / "book").glob("ch*.md")):
        notebook = root / "book" / "_generated" / f"{chapter.stem}.ipynb"
        if not notebook.is_file() or notebook.stat().st_mtime < chapter.stat().st_mtime:
            raise SystemExit(f"{notebook.relative_to(root)} is missing or stale: run `make book`")
        notebooks.append(notebook)
    return notebooks


def build_repository(
    target: Path, ref: str = "HEAD", chapters: list[Path] | None = None
) -> dict[str, int]:
    """The student repository at `target` (a fresh git repository, one commit) from commit `ref`.
    Returns how many files of each kind it holds."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    files = [p for p in tracked_files(ref) if allowed(p)]
    with tarfile.open(fileobj=io.BytesIO(git("archive", ref, "--", *files).stdout)) as archive:
        archive.extractall(target, filter="data")
    counts: dict[str, int] = {}
    for path in files:
        kind = path.split("/")[0]
        counts[kind] = counts.get(kind, 0) + 1
    for notebook in chapters or []:
        (target / "chapters").mkdir(exist_ok=True)
        shutil.copyfile(notebook, target / "chapters" / notebook.name)
    counts["chapters"] = len(chapters or [])
    (target / "README.md").write_text(STUDENT_README.format(name=NAME), encoding="utf-8")
    (target / ".gitignore").write_text(STUDENT_GITIGNORE, encoding="utf-8")
    when = git("log", "-1", "--format=%cI", ref).stdout.decode().strip()
    source = git("rev-parse", "--short", ref).stdout.decode().strip()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Sequence Models for NLP",
        "GIT_AUTHOR_EMAIL": "course@example.invalid",
        "GIT_COMMITTER_NAME": "Sequence Models for NLP",
        "GIT_COMMITTER_EMAIL": "course@example.invalid",
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_DATE": when,
    }
    git("init", "-q", "-b", "main", cwd=target, env=env)
    git("add", "-A", cwd=target, env=env)
    message = f"Sequence Models for NLP: student release (course commit {source})"
    git("commit", "-q", "--no-verify", "-m", message, cwd=target, env=env)
    return counts


def build_archive(repository: Path, archive: Path) -> None:
    """The student repository's commit as `archive` (.tar.gz, one folder `NAME/`), reproducibly."""
    tar = git("archive", "--format=tar", f"--prefix={NAME}/", "HEAD", cwd=repository).stdout
    with open(archive, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(tar)


def copy_site(site: Path, target: Path) -> int:
    if not (site / "index.html").is_file():
        raise SystemExit(f"no built site at {site}: run `make book`")
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(site, target, ignore=lambda folder, names: SITE_SKIP & set(names))
    return sum(1 for p in target.rglob("*") if p.is_file())


def build_release(
    out: Path,
    ref: str = "HEAD",
    site: Path | None = ROOT / "_build" / "html",
    chapters: bool = True,
) -> dict:
    """Build everything students get into `out`, then search it; raises SystemExit on a finding."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    repository, archive = out / NAME, out / f"{NAME}.tar.gz"
    counts = build_repository(repository, ref, chapter_notebooks() if chapters else None)
    build_archive(repository, archive)
    paths = [repository, archive]
    if site is not None:
        counts["site files"] = copy_site(site, out / "site")
        paths.append(out / "site")
    elif (out / "site").exists():
        shutil.rmtree(out / "site")
    built = time.perf_counter() - start
    secrets = course_secrets(ref)
    findings, files = find_secrets(paths, secrets)
    report = {
        "files": counts,
        "commits": int(git("rev-list", "--count", "HEAD", cwd=repository).stdout),
        "archive bytes": archive.stat().st_size,
        "secret lines": len(secrets.lines),
        "reference files": len(secrets.blobs),
        "files searched": files,
        "findings": [str(f) for f in findings],
        "seconds": {
            "build": round(built, 1),
            "search": round(time.perf_counter() - start - built, 1),
        },
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m seqmodels.grading.release", description=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the student release and search it")
    build.add_argument("--out", type=Path, default=ROOT / "_build" / "release")
    build.add_argument("--ref", default="HEAD", help="the commit to release (default HEAD)")
    build.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    build.add_argument("--no-site", action="store_true", help="the repository and archive only")
    build.add_argument(
        "--allow-dirty", action="store_true", help="release HEAD although the tree has changes"
    )
    check = sub.add_parser("check", help="search folders or archives for the course's secrets")
    check.add_argument("paths", type=Path, nargs="+")
    check.add_argument("--ref", default="HEAD")
    feedback = sub.add_parser("feedback", help="nbgrader release_feedback after `make grade`")
    feedback.add_argument("assignment")
    feedback.add_argument("--course", type=Path, default=ROOT, help="the course directory")
    solution = sub.add_parser("solution", help="a problem set's solution, after its deadline")
    solution.add_argument("assignment")
    solution.add_argument(
        "--out", type=Path, default=ROOT / "_build" / "release" / "after-deadline"
    )
    solution.add_argument("--ref", default="HEAD")
    args, extra = parser.parse_known_args(argv)  # the feedback command passes the rest to nbgrader

    from .after_deadline import build_solution, release_feedback

    if args.command == "feedback":
        return release_feedback(args.assignment, extra, args.course.resolve())
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "solution":
        target, findings = build_solution(args.assignment, args.out, args.ref)
        if findings:
            target.unlink()
            print("REFUSED: the solution gives away\n  " + "\n  ".join(map(str, findings)))
            return 1
        print(f"{target}: the autograded answers and public tests; nothing else of the source")
        return 0
    if args.command == "check":
        findings, files = find_secrets(args.paths, course_secrets(args.ref))
        print("\n".join(map(str, findings)) or f"no secret in {files} files")
        return 1 if findings else 0
    dirty = dirty_inputs() if args.ref == "HEAD" else []
    if dirty and not args.allow_dirty:
        print(
            "uncommitted changes in what a release is built from (commit them, or pass "
            "--allow-dirty to release HEAD as committed):\n  " + "\n  ".join(dirty[:20]),
            file=sys.stderr,
        )
        return 2
    report = build_release(
        args.out, args.ref, None if args.no_site else args.site, chapters=not args.no_site
    )
    for key, value in report.items():
        if key != "findings":
            print(f"{key}: {value}")
    if report["findings"]:
        print("REFUSED: the release gives away\n  " + "\n  ".join(report["findings"]))
        return 1
    print(f"release in {args.out}: no secret found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
