"""Helpers shared by tests/test_execution_stall.py and benchmarks/execution_stall_soak.py.

- `busy_load`: busy-loop processes (one per core by default) that end by themselves after a
  bounded time or when their parent dies, and are killed on exit, so nothing is left behind.
- `STRESS_CELL`: a cell that floods the client with messages (widget comm updates, display
  updates, flushed stream writes) and records its own work time.
- `seconds_after_work`: how long the client took to move on after the kernel had finished a cell,
  from the kernel's own timestamps (nbclient's ``record_timing``) and the client's clock.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
import sys
import time
from collections.abc import Iterator

from nbformat import NotebookNode

# a busy loop that ends after `seconds`, or as soon as its parent is gone (killed, not cleaned up)
BUSY = """\
import os, time
parent, end = os.getppid(), time.monotonic() + {seconds}
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextlib.contextmanager
def busy_load(processes: int | None = None, seconds: float = 120.0) -> Iterator[list[int]]:
    """`processes` busy loops (default: one per core) for at most `seconds`, ended on exit."""
    count = processes if processes is not None else (os.cpu_count() or 1)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUSY.format(seconds=seconds)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def stress_source(comm_updates: int = 2000, displays: int = 300, streams: int = 300) -> str:
    """A cell sending ``comm_updates + displays + streams`` messages, most of them at once."""
    return f"""\
import sys, time
import ipywidgets
from IPython.display import display
_t0 = time.perf_counter()
_slider = ipywidgets.IntSlider()
display(_slider)
for _i in range({comm_updates}):
    _slider.value = _i  # one comm_msg (a widget state update) each
_handle = display("update 0", display_id=True)
for _i in range({displays}):
    _handle.update(f"update {{_i}}")
for _i in range({streams}):
    print("line", _i)
    sys.stdout.flush()  # one stream message each
_work = time.perf_counter() - _t0
print(f"work {{_work:.3f}} s")
"""


STRESS_CELL = stress_source()


def _stamp(value) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        date = value
    else:
        date = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return date if date.tzinfo else date.replace(tzinfo=datetime.UTC)


def seconds_after_work(cell: NotebookNode, finished: float) -> float:
    """Seconds from the kernel's last word on `cell` (its reply or its idle status, whichever
    came later by the kernel's clock) to `finished` (``time.time()`` when the client moved on)."""
    timing = cell.metadata.get("execution", {})
    stamps = [
        _stamp(timing[key]) for key in ("shell.execute_reply", "iopub.status.idle") if key in timing
    ]
    if not stamps:
        raise ValueError("the cell has no kernel timestamps (record_timing off?)")
    return finished - max(stamps).timestamp()


def timed_hooks(finished: dict[int, float]):
    """An ``on_cell_executed`` hook that stores ``time.time()`` per cell index in `finished`."""

    def on_cell_executed(cell, cell_index, execute_reply) -> None:
        finished[cell_index] = time.time()

    return on_cell_executed
