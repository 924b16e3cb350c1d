"""A notebook client that cannot sit idle after a finished cell: every wait on the kernel is sliced.

nbclient (`nbclient.NotebookClient`, which Jupyter Book's executor and nbgrader's ``Execute`` both
are) waits for a cell's ``execute_reply`` with one ``poll`` on the shell socket lasting the whole
cell timeout, and for its IOPub messages with a ``poll`` that has no timeout at all. pyzmq's
asyncio sockets learn that a message is ready from ZMQ's file descriptor, which is
*edge-triggered*: a wake-up that is missed (the edge consumed while no reader waited, under load)
is not repeated, and the message then sits in the socket until the poll's timeout fires, when
pyzmq checks the socket once more and finds it. That is the stall this course saw: Chapter 9 took
324 s and 329 s under myst-nb's 300 s cell timeout (its normal time is 25-30 s), and a downloaded
copy sat 595 s under a 600 s limit, each time finishing normally once the timeout came round,
with the kernel idle in ``epoll_wait`` the whole time. A message that ZMQ had *dropped* would
never have been found; a ready message that nobody was woken for is found exactly then. The soak
``benchmarks/execution_stall_soak.py`` reproduces it: with nbclient's own client, 3 of 20 explorer
cells beside two busy loops waited out their whole (30 s) timeout, each for its ``execute_reply``.

`SlicedWaits`, mixed into any `NotebookClient` subclass, fixes it whatever the cause:

- **Sliced polls.** While a cell runs, every wait on the shell and IOPub channels is cut into
  polls of at most `poll_slice` seconds (0.5 s), each ending in pyzmq's own level check of the
  socket; the overall deadline is unchanged. A ready message is read within a slice, woken or not.
- **An idle status without its reply.** The kernel sends a cell's reply before its ``idle``
  status, so once the idle status is in, the reply is due. If it has not come `reply_grace`
  seconds (5 s) later, the client builds one from what the cell showed (``error`` with the
  cell's own error output if it had one, else ``ok``), logs a warning, and moves on.
- **A reply without its idle status** (an IOPub message lost, e.g. dropped at a high-water mark)
  is nbclient's own case: it waits `iopub_timeout` (4 s) more, then moves on.

A long cell is never cut short: a slice only repeats the poll, the cell's timeout stays the
cell's, and the grace period starts only with the idle status, which the kernel sends after the
cell's work. `recovered` counts messages found by a slice's closing check rather than by a wake-up, after
waiting unnoticed for half a slice or more while the event loop kept time: missed wake-ups
(`recoveries` has each one; the soak in ``benchmarks/execution_stall_soak.py`` reports them).

`SlicedNotebookClient` is `NotebookClient` with the mixin and `execute` is a drop-in for
`nbclient.execute`; the book's build uses them through ``book/_ext/execution_client.py``, and
the grader's `GuardedExecute` has the mixin among its bases.
"""

from __future__ import annotations

import datetime
import time
import typing as t
from contextlib import contextmanager
from queue import Empty

from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbformat import NotebookNode
from traitlets import Float, HasTraits, Integer, List

__all__ = ["SlicedNotebookClient", "SlicedWaits", "execute"]


def _age(msg: dict) -> float | None:
    """Seconds since the kernel stamped `msg` (None when it carries no usable date)."""
    date = msg.get("header", {}).get("date")
    if isinstance(date, str):
        try:
            date = datetime.datetime.fromisoformat(date)
        except ValueError:
            return None
    if not isinstance(date, datetime.datetime):
        return None
    if date.tzinfo is None:
        date = date.replace(tzinfo=datetime.UTC)
    return (datetime.datetime.now(datetime.UTC) - date).total_seconds()


class SlicedWaits(HasTraits):
    """Mixin for an `nbclient.NotebookClient` subclass: no wait outlives its message (see module)."""

    poll_slice = Float(
        0.5, help="longest single poll of a kernel channel, seconds; the deadline is unchanged"
    ).tag(config=True)
    reply_grace = Float(
        5.0, help="seconds to wait for a cell's execute_reply once its idle status has arrived"
    ).tag(config=True)
    recovered = Integer(0, help="messages found only by a slice's closing check (missed wake-ups)")
    #: (channel, msg_type, seconds it had waited, seconds the poll took) of each one recovered
    recoveries = List()

    @contextmanager
    def _sliced_channels(self) -> t.Iterator[None]:
        """Replace the shell and IOPub channels' ``get_msg`` with sliced ones for one cell."""
        kc = self.kc
        channels = {"shell": kc.shell_channel, "iopub": kc.iopub_channel}
        saved = {name: ch.__dict__.get("get_msg") for name, ch in channels.items()}
        for name, channel in channels.items():
            channel.get_msg = self._sliced(channel.get_msg, name)
        try:
            yield
        finally:
            for name, channel in channels.items():
                if saved[name] is None:
                    del channel.get_msg
                else:
                    channel.get_msg = saved[name]

    def _sliced(self, get_msg: t.Callable, name: str) -> t.Callable:
        async def sliced(timeout: float | None = None, **kwargs: t.Any) -> dict:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if name == "shell" and self._reply_overdue():
                    return self._substitute_reply()
                step = self.poll_slice
                if deadline is not None:
                    step = max(0.0, min(step, deadline - time.monotonic()))
                started = time.monotonic()
                try:
                    msg = await get_msg(timeout=step, **kwargs)
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
                    continue
                # found by the slice's closing check, on time (the loop was not starved), though
                # it had been there for half the slice or more: the loop was not woken for it
                elapsed = time.monotonic() - started
                if step > 0 and 0.9 * step <= elapsed <= 1.5 * step:
                    age = _age(msg)
                    if age is not None and age >= 0.5 * step:
                        self.recovered += 1
                        self.recoveries.append((name, msg.get("msg_type"), age, elapsed))
                        self.log.warning(
                            "a %s message (%s) waited %.2f s unnoticed; read by a sliced poll",
                            name,
                            msg.get("msg_type"),
                            age,
                        )
                return msg

        return sliced

    def _reply_overdue(self) -> bool:
        idle_at = getattr(self, "_sliced_idle_at", None)
        return idle_at is not None and time.monotonic() - idle_at > self.reply_grace

    def _substitute_reply(self) -> dict:
        """An ``execute_reply`` for the running cell, from its own outputs (reply never came)."""
        self.log.warning(
            "the kernel went idle but its execute_reply did not arrive within %.1f s; moving on",
            self.reply_grace,
        )
        self._sliced_idle_at = None
        content: dict[str, t.Any] = {"status": "ok"}
        cell = getattr(self, "_sliced_cell", None)
        errors = [o for o in (cell.outputs if cell is not None else []) if o.output_type == "error"]
        if errors:
            error = errors[-1]
            content = {
                "status": "error",
                "ename": error.get("ename", ""),
                "evalue": error.get("evalue", ""),
                "traceback": list(error.get("traceback", [])),
            }
        return {
            "header": {"msg_type": "execute_reply", "msg_id": ""},
            "msg_type": "execute_reply",
            "parent_header": {"msg_id": self._sliced_parent},
            "metadata": {},
            "content": content,
        }

    def process_message(
        self, msg: dict[str, t.Any], cell: NotebookNode, cell_index: int
    ) -> NotebookNode | None:
        content = msg.get("content") or {}
        if msg.get("msg_type") == "status" and content.get("execution_state") == "idle":
            self._sliced_idle_at = time.monotonic()
            self._sliced_parent = msg.get("parent_header", {}).get("msg_id")
        return super().process_message(msg, cell, cell_index)

    async def async_execute_cell(
        self,
        cell: NotebookNode,
        cell_index: int,
        execution_count: int | None = None,
        store_history: bool = True,
    ) -> NotebookNode:
        self._sliced_idle_at = None
        self._sliced_cell = cell
        try:
            with self._sliced_channels():
                return await super().async_execute_cell(
                    cell, cell_index, execution_count, store_history
                )
        finally:
            self._sliced_idle_at = None
            self._sliced_cell = None

    # nbclient binds its own coroutine here (nbconvert's ExecutePreprocessor calls this one)
    execute_cell = run_sync(async_execute_cell)


class SlicedNotebookClient(SlicedWaits, NotebookClient):
    """`nbclient.NotebookClient` whose waits on the kernel are sliced (see the module)."""


def execute(nb: NotebookNode, cwd: str | None = None, km: t.Any = None, **kwargs: t.Any):
    """`nbclient.execute` with `SlicedNotebookClient`: run `nb` in place and return it."""
    resources = {}
    if cwd is not None:
        resources["metadata"] = {"path": cwd}
    return SlicedNotebookClient(nb=nb, resources=resources, km=km, **kwargs).execute()
