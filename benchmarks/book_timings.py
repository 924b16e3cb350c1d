"""Time the book: each chapter executed on its own, a clean build, and a no-change rebuild.

    .venv/bin/python benchmarks/book_timings.py            # everything (minutes)
    .venv/bin/python benchmarks/book_timings.py --chapters # chapter execution only
    .venv/bin/python benchmarks/book_timings.py --chapters ch02 ch03  # only the chapters named

Prints a table; writes nothing but _build/ (the clean build deletes and rebuilds it).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import torch
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def time_chapter(path: Path) -> float:
    """Seconds to execute one chapter from a fresh kernel, as the book build does."""
    notebook = jupytext.read(path)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def time_make_book() -> float:
    start = time.perf_counter()
    subprocess.run(["make", "book"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", action="store_true", help="only time chapter execution")
    parser.add_argument(
        "names", nargs="*", help="time only chapters whose file name starts with one of these"
    )
    args = parser.parse_args()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, Python {sys.version.split()[0]}"
    )
    for chapter in sorted((ROOT / "book").glob("ch*.md")):
        if args.names and not chapter.stem.startswith(tuple(args.names)):
            continue
        print(f"chapter {chapter.stem:<28} executes in {time_chapter(chapter):6.1f} s")
    if args.chapters:
        return
    shutil.rmtree(ROOT / "_build", ignore_errors=True)
    print(f"clean build (make book, empty cache)    {time_make_book():6.1f} s")
    print(f"no-change rebuild (make book)           {time_make_book():6.1f} s")


if __name__ == "__main__":
    main()
