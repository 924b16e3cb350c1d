"""No cell waits past its own work: `seqmodels.execution_client` for the book and for grading.

The stress tests run cells that send thousands of messages (widget updates, display updates,
flushed prints) while busy loops hold both cores, through the path each user takes: jupyter-cache's
``single_nb_execution`` after the book's ``sliced_execution`` extension is set up (what myst-nb
calls), and the grader's `GuardedExecute`. Each cell's time after its own work (from the kernel's
last timestamp on it to the client moving on) must be a small part of the cell's timeout: a missed
message costs the whole timeout, which these tests would show as a ratio near 1.

The fault tests reproduce each failure on purpose, on a real kernel: a channel whose wake-ups never
come (the message is only found when a poll times out, as in the 324 s Chapter 9 build), an idle
status without its reply, a reply without its idle status. A long cell must still run to its end.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from seqmodels.execution_client import SlicedNotebookClient, SlicedWaits
from stall_helpers import STRESS_CELL, busy_load, seconds_after_work, timed_hooks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

TIMEOUT = 30  # each cell's timeout in the stress tests; a stall would show as ~30 s after work
RATIO = 0.2  # time after work / timeout: nbclient's own 4 s wait for a lost idle status fits
STRESS_CELLS = 4  # cells per stress notebook (each ~2,600 messages)


def notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def check_after_work(nb: nbformat.NotebookNode, finished: dict[int, float]) -> list[float]:
    after = [seconds_after_work(cell, finished[i]) for i, cell in enumerate(nb.cells)]
    worst = max(after)
    assert worst / TIMEOUT < RATIO, f"waited {worst:.1f} s after a cell's work: {after}"
    return after


def test_book_execution_under_load_never_waits_past_the_work(monkeypatch, tmp_path):
    """myst-nb's execution path (jupyter-cache's single_nb_execution), with the book's extension."""
    import sliced_execution
    from jupyter_cache.executors import utils

    monkeypatch.setattr(utils, "executenb", utils.executenb)  # undone after the test
    sliced_execution.use_sliced_client()
    sliced_cells = []
    enter = SlicedWaits._sliced_channels

    def counting(self):
        sliced_cells.append(type(self))
        return enter(self)

    monkeypatch.setattr(SlicedWaits, "_sliced_channels", counting)
    finished: dict[int, float] = {}
    nb = notebook(*[STRESS_CELL] * STRESS_CELLS)
    with busy_load(seconds=60):
        result = utils.single_nb_execution(
            nb,
            cwd=str(tmp_path),
            timeout=TIMEOUT,
            allow_errors=False,
            record_timing=True,  # the kernel's timestamps (myst-nb leaves them out)
            on_cell_executed=timed_hooks(finished),
        )
    assert result.err is None, result.exc_string
    assert sliced_cells == [SlicedNotebookClient] * STRESS_CELLS
    check_after_work(nb, finished)
    for cell in nb.cells:  # every output arrived: the last line the cell prints is there
        assert "line 299\n" in stdout(cell) and "work " in stdout(cell)


@pytest.mark.parametrize("sandbox", ["none", "bubblewrap"])
def test_graded_cells_under_load_never_wait_past_the_work(sandbox):
    """The grader's GuardedExecute, on an unsandboxed and on a sandboxed kernel."""
    if sandbox == "bubblewrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    from seqmodels.grading.preprocessors import GuardedExecute, state

    finished: dict[int, float] = {}
    nb = notebook(*[STRESS_CELL] * STRESS_CELLS)
    execute = GuardedExecute(
        sandbox=sandbox,
        timeout=TIMEOUT,
        notebook_budget=4 * TIMEOUT,
    )
    execute.on_cell_executed = timed_hooks(finished)
    assert isinstance(execute, SlicedWaits)
    resources: dict = {}
    with busy_load(seconds=60):
        nb, resources = execute.preprocess(nb, resources)
    notes = state(resources).get("notes", {})
    assert sorted(finished) == list(range(STRESS_CELLS)), notes
    check_after_work(nb, finished)
    assert not any("never reached the grader" in str(n) for n in notes.values()), notes
    for cell in nb.cells:  # the cells ran to their end (no error: ipywidgets is in the sandbox)
        assert "line 299\n" in stdout(cell), cell.outputs[-3:]
        assert not [o for o in cell.outputs if o.output_type == "error"]


# --- faults reproduced on a real kernel --------------------------------------------------------


class FaultyClient(SlicedNotebookClient):
    """Applies `fault(kc)` to the kernel client once it is started (before any cell)."""

    fault = None

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        type(self).fault(kc)
        return kc


def deaf(channel) -> None:
    """The channel is never woken: a poll only sees a message when its timeout runs out (then
    pyzmq checks the socket once more), which is what a missed edge-triggered wake-up does."""
    get_msg = channel.get_msg

    async def never_woken(timeout=None, **kwargs):
        if timeout is None:
            await asyncio.Event().wait()  # for ever: nothing wakes it
        await asyncio.sleep(timeout)
        return await get_msg(timeout=0, **kwargs)

    channel.get_msg = never_woken


def dropping(channel, lost) -> None:
    """The channel loses every message for which `lost(msg)` is true."""
    get_msg = channel.get_msg

    async def losing(timeout=None, **kwargs):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = await get_msg(timeout=left, **kwargs)
            if not lost(msg):
                return msg

    channel.get_msg = losing


def run_faulty(
    fault, *sources: str, **options
) -> tuple[nbformat.NotebookNode, FaultyClient, float]:
    nb = notebook(*sources)
    client = type("Client", (FaultyClient,), {"fault": staticmethod(fault)})(
        nb, kernel_name="python3", **options
    )
    started = time.monotonic()
    client.execute()
    return nb, client, time.monotonic() - started


def stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_reply_nobody_was_woken_for_is_read_within_a_slice():
    def fault(kc):
        deaf(kc.shell_channel)
        deaf(kc.iopub_channel)

    nb, client, seconds = run_faulty(
        fault, "print('one')", "print('two')", timeout=60, poll_slice=0.3, shell_timeout_interval=1
    )
    assert [stdout(c) for c in nb.cells] == ["one\n", "two\n"]
    assert seconds < 30  # unsliced, each cell would wait out its 60 s timeout
    assert client.recovered >= 1


def test_an_idle_status_without_its_reply_ends_the_cell_after_the_grace():
    def fault(kc):
        dropping(kc.shell_channel, lambda m: m["msg_type"] == "execute_reply")

    nb, client, seconds = run_faulty(
        fault, "x = 6 * 7\nprint(x)", "print(x + 1)", timeout=60, reply_grace=1.0
    )
    assert [stdout(c) for c in nb.cells] == ["42\n", "43\n"]
    assert seconds < 30
    # an error is still an error: the substitute reply is built from the cell's error output
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        run_faulty(fault, "1 / 0", "print('not run')", timeout=60, reply_grace=1.0)


def test_a_reply_without_its_idle_status_ends_the_cell_after_iopub_timeout():
    def idle(msg) -> bool:
        return msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"

    def fault(kc):
        dropping(kc.iopub_channel, idle)

    nb, _, seconds = run_faulty(fault, "print('one')", "print('two')", timeout=60, iopub_timeout=1)
    assert [stdout(c) for c in nb.cells] == ["one\n", "two\n"]
    assert seconds < 30


def test_a_long_cell_is_not_cut_short():
    nb, _, seconds = run_faulty(
        lambda kc: None,
        "import time\ntime.sleep(4)\nprint('done')",
        timeout=60,
        poll_slice=0.1,
        reply_grace=0.2,
        iopub_timeout=1,
    )
    assert stdout(nb.cells[0]) == "done\n"
    assert seconds >= 4
