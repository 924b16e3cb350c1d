"""A chapter re-executes when a library module it reaches changes, and only then."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_book import HEADER, JUPYTER_BOOK, build_tiny_book

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from chapters import page_files  # noqa: E402
from execution_cache import chapter_key, chapter_modules  # noqa: E402

PAGES = page_files(ROOT)  # every page of every chapter


def page_id(path: Path) -> str:
    return path.relative_to(ROOT / "book").with_suffix("").as_posix()


def chapter(page: str) -> str:
    return page.split("/")[0]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    copy = tmp_path_factory.mktemp("lib")
    shutil.copytree(ROOT / "lib" / "seqmodels", copy / "seqmodels")
    return copy


def keys(lib: Path) -> dict[str, str]:
    requirements = ROOT / "requirements.txt"
    return {
        page_id(p): chapter_key(p.read_text(encoding="utf-8"), lib, requirements) for p in PAGES
    }


def changed_by(lib: Path, relative: str) -> set[str]:
    before = keys(lib)
    path = lib / "seqmodels" / relative
    original = path.read_bytes()
    path.write_bytes(original + b"\n# an edit\n")
    try:
        after = keys(lib)
    finally:
        path.write_bytes(original)
    return {name for name in before if before[name] != after[name]}


def test_a_change_to_decoding_re_executes_only_the_decoding_chapters_pages(lib):
    changed = changed_by(lib, "decoding.py")
    assert changed and {chapter(page) for page in changed} == {"ch09_decoding"}


def test_a_module_every_page_reaches_re_executes_all_of_them(lib):
    assert changed_by(lib, "glue.py") == {page_id(p) for p in PAGES}


def test_imports_are_followed_through_other_modules_and_package_data(lib):
    # ch04's pages import seqmodels.rnn, whose own imports reach seqmodels.padding
    reached = set()
    for page in PAGES:
        if page_id(page).startswith("ch04_gradients"):
            reached |= set(chapter_modules(page.read_text(encoding="utf-8"), lib))
    assert "seqmodels.padding" in reached
    reached_results = {
        page_id(p) for p in PAGES if "seqmodels.results" in chapter_modules(p.read_text(), lib)
    }
    assert changed_by(lib, "results/ch09_g2p_beam.json") == reached_results
    assert not {chapter(p) for p in reached_results} & {"ch02_backprop"}  # it quotes no stored run


def test_relative_and_lazy_imports_count():
    text = "```{code-cell} ipython3\ndef f():\n    from seqmodels.glue import glue\n```\n"
    lib = ROOT / "lib"
    assert set(chapter_modules(text, lib)) == {"seqmodels", "seqmodels.glue"}


TINY = """\
# Chapter {n}

```{{code-cell}} ipython3
from seqmodels.metrics import perplexity
print(perplexity(0.0, {n}))
```
"""


@pytest.mark.book
def test_a_changed_key_re_executes_that_chapter_and_no_other(tmp_path):
    pages = {"ch97_one": HEADER + TINY.format(n=1), "ch98_two": HEADER + TINY.format(n=2)}
    first = build_tiny_book(tmp_path, pages)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    keys_file = tmp_path / "_build" / ".jupyter_cache" / "chapter_keys.json"
    recorded = json.loads(keys_file.read_text())
    assert len(recorded) == 2
    one = next(p for p in recorded if p.endswith("ch97_one.md"))
    recorded[one] = "a stale key"  # as if a module ch97 imports had changed
    keys_file.write_text(json.dumps(recorded))
    # rebuild without touching any source: Sphinx itself would re-read nothing
    second = subprocess.run(
        [JUPYTER_BOOK, "build", str(tmp_path), "--builder", "html", "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    log = second.stdout + second.stderr
    assert second.returncode == 0, log[-3000:]
    assert "library code changed for: ch97_one;" in log
    # ch97 is read again and re-executed; ch98, unchanged, is not even read
    assert log.count("Executed notebook") == 1 and "Using cached notebook" not in log


def test_the_instructors_edition_also_keys_its_solution_pages(monkeypatch):
    from execution_cache import executed_pages

    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("SEQMODELS_EDITION", "student")
    student = executed_pages(root)
    assert student and not any("instructor" in p.parts for p in student)
    monkeypatch.setenv("SEQMODELS_EDITION", "instructor")
    instructor = executed_pages(root)
    assert instructor[: len(student)] == student
    added = {p.relative_to(root).as_posix() for p in instructor[len(student) :]}
    assert "book/instructor/solutions/ch04.md" in added
