"""Time the book: a clean build (each page's execution from the build's log, and each chapter's:
its landing page and subpages together), a no-change rebuild, and a rebuild after one library
module changed (which pages re-execute).

    .venv/bin/python benchmarks/book_timings.py                   # the three builds (minutes)
    .venv/bin/python benchmarks/book_timings.py --change decoding # the module to change
    .venv/bin/python benchmarks/book_timings.py --chapters ch02 ch03  # their pages executed on their own

Prints a table; writes nothing but _build/ (the clean build deletes and rebuilds it). The changed
module gets one comment line appended for its rebuild and is restored afterwards.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import torch
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from chapters import page_files  # noqa: E402  (the chapters' pages, from _toc.yml)


def time_chapter(path: Path) -> float:
    """Seconds to execute one page from a fresh kernel in an empty folder, as the book build does
    (a model an earlier page trained is trained again unless SEQMODELS_MODEL_CACHE is set)."""
    notebook = jupytext.read(path)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": tempfile.mkdtemp(prefix="book-timings-")}},
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


EXECUTED = re.compile(r"book/(ch\w+(?:/\w+)?)\.md: Executed notebook in ([\d.]+) seconds")


def time_make_book() -> tuple[float, dict[str, float]]:
    """Seconds for ``make book``, and each chapter it executed with mystnb's execution seconds."""
    start = time.perf_counter()
    build = subprocess.run(["make", "book"], cwd=ROOT, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, {m[1]: float(m[2]) for m in EXECUTED.finditer(build.stdout + build.stderr)}


def report(label: str, seconds: float, pages: dict[str, float]) -> None:
    executed = ", ".join(f"{name} {t:.1f}" for name, t in sorted(pages.items())) or "none"
    print(f"{label:<40} {seconds:6.1f} s; pages executed (s): {executed}")
    chapters: dict[str, float] = {}
    for name, t in pages.items():
        chapters[name.split("/")[0]] = chapters.get(name.split("/")[0], 0.0) + t
    if chapters:
        print("  by chapter (s): " + ", ".join(f"{c} {t:.1f}" for c, t in sorted(chapters.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", action="store_true", help="only time chapter execution")
    parser.add_argument(
        "--change",
        default="decoding",
        help="the lib/seqmodels module to change (default: decoding)",
    )
    parser.add_argument(
        "names", nargs="*", help="time only chapters whose file name starts with one of these"
    )
    args = parser.parse_args()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, Python {sys.version.split()[0]}"
    )
    module = ROOT / "lib" / "seqmodels" / f"{args.change.replace('.', '/')}.py"
    if not module.is_file():
        parser.error(
            f"expected a module of lib/seqmodels, got {args.change!r} ({module} is absent)"
        )
    if args.chapters:
        for page in page_files(ROOT):
            name = page.relative_to(ROOT / "book").with_suffix("").as_posix()
            if args.names and not name.startswith(tuple(args.names)):
                continue
            print(f"page {name:<40} executes in {time_chapter(page):6.1f} s")
        return
    shutil.rmtree(ROOT / "_build", ignore_errors=True)
    report("clean build (make book, empty cache)", *time_make_book())
    report("no-change rebuild (make book)", *time_make_book())
    original = module.read_bytes()
    try:
        module.write_bytes(original + b"\n# book_timings.py: a one-line change\n")
        report(f"rebuild after changing {args.change}.py", *time_make_book())
    finally:
        module.write_bytes(original)


if __name__ == "__main__":
    main()
