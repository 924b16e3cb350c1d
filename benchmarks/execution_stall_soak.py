"""Soak: Chapter 9's explorer cells, run again and again beside busy loops, never wait past their work.

    .venv/bin/python benchmarks/execution_stall_soak.py [--runs 30] [--client sliced|plain]
        [--timeout 300] [--load 2] [--fresh-kernel]

The explorer cells are taken from Chapter 9's page that shows them, as they stand (the code cells that call
``sampling_explorer``: the explorer shown on the page, then the three others its prose quotes),
after a setup of the chapter's first code cell (its imports), ``glue`` and the stored KJV run the
second cell reads. Each *run* executes the explorer cells once; by default all runs share one kernel
(as a chapter does), ``--fresh-kernel`` starts one per run. While they run, ``--load`` busy loops
(default: one per core) hold the CPUs. ``--client sliced`` is `seqmodels.execution_client`'s
client (what the book and the grader use), ``--client plain`` nbclient's own, for comparison.

For each run it prints the cells' own work (the kernel's busy time, from its timestamps), the time
after the work (from the kernel's last timestamp on a cell, reply or idle, to the client moving on;
the run's worst cell) and the run's wall time; then the maximum and median time after the work,
against the cell timeout, and how many messages the sliced client found only by a slice's closing
check (``recovered``: missed wake-ups). A stalled cell would show a time after the work close to
``--timeout``.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from seqmodels.execution_client import SlicedNotebookClient  # noqa: E402
from stall_helpers import _stamp, busy_load, seconds_after_work, timed_hooks  # noqa: E402

# the page of Chapter 9 that shows the explorer (the chapter's landing page or one of its subpages)
CHAPTER = next(
    p
    for p in [
        ROOT / "book" / "ch09_decoding.md",
        *sorted((ROOT / "book" / "ch09_decoding").glob("*.md")),
    ]
    if "sampling_explorer(" in p.read_text(encoding="utf-8")
)
SETUP = 'from seqmodels.glue import claim, glue\nkjv_run = load_result("ch09_kjv_decoding")\n'


def explorer_notebook(runs: int) -> tuple[nbformat.NotebookNode, list[list[int]]]:
    """Setup cells, then `runs` copies of the explorer cells; and each run's cell indices."""
    chapter = jupytext.reads(CHAPTER.read_text(encoding="utf-8"), fmt="md:myst")
    code = [c.source for c in chapter.cells if c.cell_type == "code"]
    explorer = [s for s in code if "sampling_explorer(" in s and "import" not in s]
    if not explorer:
        raise SystemExit(f"no explorer cell found in {CHAPTER}")
    cells = [code[0], SETUP]
    indices = []
    for _ in range(runs):
        indices.append(list(range(len(cells), len(cells) + len(explorer))))
        cells += explorer
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb, indices


def busy_seconds(cell) -> float:
    timing = cell.metadata.get("execution", {})
    return (
        _stamp(timing["shell.execute_reply"]) - _stamp(timing["iopub.execute_input"])
    ).total_seconds()


def execute(nb, indices, client: str, timeout: int, cwd: str, report) -> list:
    """Run `nb`; call `report(run index, cells)` as each run's last cell is done."""
    finished: dict[int, float] = {}
    last = {cells[-1]: k for k, cells in enumerate(indices)}
    record = timed_hooks(finished)

    def on_cell_executed(cell, cell_index, execute_reply) -> None:
        record(cell, cell_index, execute_reply)
        if cell_index in last:
            cells = indices[last[cell_index]]
            # the hook runs before nbclient stores the cell: read the timing from `cell` itself
            rest = [nb.cells[i] for i in cells[:-1]]
            report([*rest, cell], [finished[i] for i in cells], finished[cells[0] - 1])

    cls = SlicedNotebookClient if client == "sliced" else NotebookClient
    runner = cls(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=True,
        resources={"metadata": {"path": cwd}},
        on_cell_executed=on_cell_executed,
    )
    runner.execute()
    return list(getattr(runner, "recoveries", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--client", choices=["sliced", "plain"], default="sliced")
    parser.add_argument("--timeout", type=int, default=300, help="cell timeout (myst-nb's: 300)")
    parser.add_argument("--load", type=int, default=None, help="busy loops (default: one a core)")
    parser.add_argument("--fresh-kernel", action="store_true", help="a new kernel for each run")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the busy loops

    print(
        f"{args.runs} runs of Chapter 9's explorer cells, client {args.client}, cell timeout "
        f"{args.timeout} s, {'a fresh kernel each run' if args.fresh_kernel else 'one kernel'}",
        flush=True,
    )
    rows = []  # (work s, after s, wall s)
    recovered = []

    def report(cells, finished, before) -> None:
        work = sum(busy_seconds(c) for c in cells)
        after = max(seconds_after_work(c, f) for c, f in zip(cells, finished, strict=True))
        rows.append((work, after, finished[-1] - before))
        print(
            f"run {len(rows):3d}: work {work:6.2f} s, after the work {after:7.3f} s "
            f"(worst cell), wall {rows[-1][2]:7.2f} s",
            flush=True,
        )

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as cwd, busy_load(args.load, seconds=24 * 3600) as pids:
        print(f"busy loops: {len(pids)} (pids {', '.join(map(str, pids))})", flush=True)
        for batch in [1] * args.runs if args.fresh_kernel else [args.runs]:
            nb, indices = explorer_notebook(batch)
            recovered += execute(nb, indices, args.client, args.timeout, cwd, report)
    after = [r[1] for r in rows]
    print(
        f"\n{len(rows)} runs in {time.monotonic() - started:.0f} s: time after the work max "
        f"{max(after):.3f} s, median {statistics.median(after):.3f} s "
        f"({max(after) / args.timeout:.2%} of the {args.timeout} s timeout); "
        f"work per run {statistics.median(r[0] for r in rows):.2f} s (median); "
        f"missed wake-ups recovered by a slice: {len(recovered)}"
    )
    for channel, msg_type, age, took in recovered:
        print(
            f"  recovered: {channel} {msg_type}, had waited {age:.2f} s (the poll took {took:.2f} s)"
        )


if __name__ == "__main__":
    main()
