"""A trace window: everything a kernel runs between two requests of the grader, in every thread.

The grader, not the test cell, opens the window. Right before a test cell whose task forbids tools
(the references' manifest says which), `GuardedExecute` sends the kernel ``open_window(nonce)``;
right after it, ``close_window(nonce, task)``, which displays one record (MIME type
`seqmodels.grading.capture.MIME`, ``kind: "window"``) that the grader keeps for `JudgeCaptures`.
So the whole test cell runs inside the window: its hidden cases, the student's ``pre_run_cell``
hooks and input transformers, threads that were already running, and anything a graded call queues.

What the window records, each aggregated as a set of names with a hard bound (`LIMIT`; a window
that reaches it is *cut*, and a cut window is never paid):

- **calls**: the qualified names of the Python and C functions run in *every* thread. Each thread
  alive at the opening gets a C profiler of its own (CPython's ``_lsprof``, installed into the
  other threads' states with ``_PyEval_SetProfile``, as Python 3.12's
  ``threading.setprofile_all_threads`` does); threads started later get one from
  ``threading.setprofile``. ``_lsprof`` keeps one entry per function, so memory is bounded by the
  code that ran, not by how long it ran.
- **ops**: TorchScript functions run in the test cell's thread (torch's profiler restricted to
  that scope; TorchScript's operators do not pass through Python, so any is a reason for review).
- **disturbed**: why the record may be incomplete. An audit hook (it cannot be removed, and it sees
  every thread) notes ``sys.setprofile``/``sys.settrace`` calls that are not the window's own, any
  use of ``ctypes``, and processes started; at the close every live thread must still carry the
  window's profiler and no trace function (code a trace function runs is invisible to profilers),
  and every thread started inside the window must have been traced.
- **processes**: processes other than the kernel alive at the opening or the close (what they run
  is not traced), and **started**: processes the window's threads started.

This is evidence from an untrusted kernel: code written to forge the record can forge it. The
window makes the routes that earned unreviewed points before (a cut trace, a thread started
earlier, work done in a hook or an earlier cell) show up as a match or as a disturbed trace.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading

#: the most names of each kind a window keeps; reaching it cuts the window (held for review)
LIMIT = 20_000
#: the longest name kept (longer ones are shortened; no rule names anything that long)
NAME_LENGTH = 300
#: reasons for a disturbed window kept, and processes listed
EVIDENCE = 40
#: audit events that start another process (what it runs is not traced)
PROCESS_EVENTS = (
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "pty.spawn",
)

_window: _Window | None = None
_opened = 0  # windows this process has opened
_audit_installed = False
_ours = threading.local()  # .busy: the window's own calls (its profilers, its ctypes)
_BOOTSTRAP = threading.Thread._bootstrap_inner.__code__


# ------------------------------------------------------------------ CPython's thread states


class _ThreadStates:
    """The interpreter's thread states, through the C API (CPython 3.11)."""

    # PyThreadState of 3.11: prev, next, interp, _initialized/_static, recursion_*, tracing,
    # tracing_what, cframe, then c_profilefunc, c_tracefunc, c_profileobj, c_traceobj
    PROFILE_FUNC, TRACE_FUNC, PROFILE_OBJ = 64, 72, 80

    def __init__(self) -> None:
        api = ctypes.pythonapi
        vp = ctypes.c_void_p
        for name, res, args in (
            ("PyInterpreterState_Get", vp, []),
            ("PyInterpreterState_ThreadHead", vp, [vp]),
            ("PyThreadState_Next", vp, [vp]),
            ("PyThreadState_Get", vp, []),
            ("PyThreadState_GetID", ctypes.c_uint64, [vp]),
            ("_PyEval_SetProfile", ctypes.c_int, [vp, vp, ctypes.py_object]),
            ("PyThreadState_New", vp, [vp]),
            ("PyThreadState_Clear", None, [vp]),
            ("PyThreadState_Delete", None, [vp]),
        ):
            getattr(api, name).restype = res
            getattr(api, name).argtypes = args
        self.api = api

    def all(self) -> list[int]:
        states, state = (
            [],
            self.api.PyInterpreterState_ThreadHead(self.api.PyInterpreterState_Get()),
        )
        while state:
            states.append(state)
            state = self.api.PyThreadState_Next(state)
        return states

    def current(self) -> int:
        return self.api.PyThreadState_Get()

    def field(self, state: int, offset: int) -> int:
        return ctypes.c_void_p.from_address(state + offset).value or 0

    def set_profile(self, state: int, func: int, profiler: object) -> None:
        self.api._PyEval_SetProfile(state, func, profiler)

    def clear_profile(self, state: int) -> None:
        self.api._PyEval_SetProfile(state, None, None)

    def ident(self, state: int) -> int:
        return self.api.PyThreadState_GetID(state)

    def next_ident(self) -> int:
        """The id the interpreter gives its next thread state (each thread takes one, in order):
        a thread state made and deleted at once."""
        state = self.api.PyThreadState_New(self.api.PyInterpreterState_Get())
        ident = self.api.PyThreadState_GetID(state)
        self.api.PyThreadState_Clear(state)
        self.api.PyThreadState_Delete(state)
        return ident


# ------------------------------------------------------------------ names


_SITE = re.compile(r".*/(?:site-packages|dist-packages|lib/python3\.\d+)/(.+)\.py$")
_COURSE = re.compile(r".*/((?:seqmodels|sitecustomize)\b.*)\.py$")


def module_of(filename: str) -> str:
    """The module a code object's file is, from its path alone (``.../site-packages/torch/nn/
    functional.py`` → ``torch.nn.functional``); a notebook cell or a file of the student's keeps
    its path."""
    if filename.startswith("<frozen ") and filename.endswith(">"):
        return filename[8:-1]
    match = _SITE.match(filename) or _COURSE.match(filename)
    if not match:
        return filename
    return match.group(1).removesuffix("/__init__").replace("/", ".")


_BUILTIN = re.compile(r"<built-in method ([\w.]+)>$")
_METHOD = re.compile(r"<method '(\w+)' of '([\w.]+)' objects>$")
_BOUND = re.compile(r"<built-in method (\w+) of ([\w.]+) object at 0x[0-9a-f]+>$")
_PLAIN = re.compile(r"<([\w.]+)>$")


def name_of(code: object) -> str:
    """The qualified name of one `_lsprof` entry: a code object, or its description of a C
    function (``<built-in method torch._C._nn.cross_entropy_loss>`` → ``torch._C._nn.
    cross_entropy_loss``, ``<method 'run_backward' of 'torch._C._EngineBase' objects>`` →
    ``torch._C._EngineBase.run_backward``)."""
    if not isinstance(code, str):
        name = f"{module_of(code.co_filename)}.{code.co_qualname}"
    elif match := _BUILTIN.match(code):
        name = match.group(1)
    elif match := _METHOD.match(code):
        name = f"{match.group(2)}.{match.group(1)}"
    elif match := _BOUND.match(code):
        name = f"{match.group(2)}.{match.group(1)}"
    elif match := _PLAIN.match(code):
        name = match.group(1) if "." in match.group(1) else f"builtins.{match.group(1)}"
    else:
        name = re.sub(r" at 0x[0-9a-f]+", "", code)
    return name[:NAME_LENGTH]


# ------------------------------------------------------------------ processes


def _stat(pid: str) -> tuple[int, int, str] | None:
    """(parent pid, start time, command) of process `pid`, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    command, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
    fields = rest.split()
    return int(fields[1]), int(fields[19]), command


def other_processes() -> list[str]:
    """Processes other than this one that it could have handed work to: in a PID namespace of its
    own (the sandbox), every process started after it; otherwise its descendants."""
    me = os.getpid()
    table = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (stat := _stat(pid)) is not None:
            table[int(pid)] = stat
    if me not in table:
        return []
    with open("/proc/self/status") as f:
        nested = any(
            line.startswith("NSpid:") and len(line.split()) > 2 for line in f.read().splitlines()
        )

    def descends(pid: int) -> bool:
        seen = set()
        while pid in table and pid not in seen:
            seen.add(pid)
            pid = table[pid][0]
            if pid == me:
                return True
        return False

    started = table[me][1]
    return sorted(
        f"{pid} {command}"
        for pid, (_, start, command) in table.items()
        if pid != me and (descends(pid) or (nested and start > started))
    )


# ------------------------------------------------------------------ the window


class _Window:
    """What ran between `start` and `stop`; see the module docstring."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.states = _ThreadStates()
        self.profilers: dict[int, object] = {}  # thread id → its _lsprof.Profiler
        self.func = 0  # _lsprof's C profile function
        self.disturbed: list[str] = []
        self.started: list[str] = []
        self.extra: set[str] = set()
        self.first_ident = 0  # the thread-state id after the last one alive at the opening
        self.threads_traced = 0
        self.processes: list[str] = []
        self.torch_profiler = False
        self.closed = False

    def note(self, reason: str) -> None:
        if len(self.disturbed) < EVIDENCE and reason not in self.disturbed:
            self.disturbed.append(reason)

    # -- the threads' profilers
    def _profiler(self, ident: int):
        import _lsprof

        profiler = self.profilers[ident] = _lsprof.Profiler(builtins=True, subcalls=False)
        return profiler

    def start(self) -> None:
        import _lsprof  # noqa: F401 - imported before any thread is traced

        _install_audit_hook()
        self.processes = other_processes()
        _ours.busy = True
        try:
            main = self._profiler(threading.get_ident())
            main.enable()
            here = self.states.current()
            if self.states.field(here, _ThreadStates.PROFILE_OBJ) != id(main):
                main.disable()
                self.note("the window could not install its profiler (an unknown CPython layout)")
                return
            self.func = self.states.field(here, _ThreadStates.PROFILE_FUNC)
            for state in self.states.all():
                if self.states.field(state, _ThreadStates.TRACE_FUNC):
                    self.note(
                        "a thread has a trace function (sys.settrace): what it runs is hidden"
                    )
                if state != here:
                    ident = self.states.ident(state)
                    self.states.set_profile(state, self.func, self._profiler(ident))
            threading.setprofile(_thread_starts)
            self.first_ident = self.states.next_ident()
        finally:
            _ours.busy = False
        self._start_torch_profiler()

    def _start_torch_profiler(self) -> None:
        """TorchScript functions run in this thread (torch's profiler, that scope only: cheap)."""
        try:
            import torch
            from torch._C._profiler import (
                ProfilerActivity,
                ProfilerConfig,
                ProfilerState,
                RecordScope,
                _ExperimentalConfig,
            )

            config = ProfilerConfig(
                ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig()
            )
            activities = {ProfilerActivity.CPU}
            torch.autograd._prepare_profiler(config, activities)
            torch.autograd._enable_profiler(config, activities, {RecordScope.TORCHSCRIPT_FUNCTION})
            self.torch_profiler = True
        except Exception as error:  # noqa: BLE001 - a profiler already running, or no torch
            self.note(f"torch's profiler could not start ({type(error).__name__})")

    def stop(self) -> dict:
        """Stop tracing everywhere and return the window's record (without task and kind)."""
        ops: set[str] = set()
        if self.torch_profiler:
            import torch

            try:
                ops = {
                    event.name()[:NAME_LENGTH]
                    for event in torch.autograd._disable_profiler().events()
                }
            except Exception:  # noqa: BLE001 - stopped or replaced by the code that ran
                self.note("torch's profiler was stopped while the window was open")
        threading.setprofile(None)
        here = self.states.current()
        ours = {id(p) for p in self.profilers.values()}
        _ours.busy = True
        try:
            made = self.states.next_ident() - self.first_ident - 1 if self.func else 0
            states = self.states.all()
            bare = sum(
                self.states.ident(state) > self.first_ident
                and self.states.field(state, _ThreadStates.PROFILE_OBJ) not in ours
                for state in states
            )  # threads started in the window, alive, without a profiler: noted below
            if made > self.threads_traced + bare:
                self.note(
                    f"{made - self.threads_traced - bare} thread(s) started in the window ran "
                    "without its profiler"
                )
            for state in states:
                if self.states.field(state, _ThreadStates.TRACE_FUNC):
                    self.note(
                        "a thread has a trace function (sys.settrace): what it runs is hidden"
                    )
                if self.func and (
                    self.states.field(state, _ThreadStates.PROFILE_FUNC) != self.func
                    or self.states.field(state, _ThreadStates.PROFILE_OBJ) not in ours
                ):
                    self.note(
                        "a thread ran without the window's profiler (it was removed or replaced)"
                    )
                if self.func:
                    if state == here:
                        sys.setprofile(None)
                    else:
                        self.states.clear_profile(state)
        finally:
            _ours.busy = False
        self.closed = True
        calls = set(self.extra)
        for profiler in list(self.profilers.values()):
            for entry in profiler.getstats():
                calls.add(name_of(entry.code))
                if len(calls) > LIMIT:
                    break
        processes = sorted(set(self.processes) | set(other_processes()))
        cut = len(calls) > LIMIT or len(ops) > LIMIT
        return {
            "nonce": self.nonce,
            "opened": _opened,
            "ops": sorted(ops)[:LIMIT],
            "calls": sorted(calls)[:LIMIT],
            "cut": cut,
            "intact": not self.disturbed and bool(self.func),
            "disturbed": self.disturbed[:EVIDENCE],
            "processes": processes[:EVIDENCE],
            "started": self.started[:EVIDENCE],
            "threads": len(self.profilers),
        }


def _thread_starts(frame, event, arg):  # noqa: ARG001 - a profile function's signature
    """The first event of a thread started inside the window: give it a profiler of its own."""
    window = _window
    if window is None or window.closed:
        sys.setprofile(None)
        return
    _ours.busy = True
    try:
        window.extra.add(f"{module_of(frame.f_code.co_filename)}.{frame.f_code.co_qualname}")
        window._profiler(threading.get_ident()).enable()
        window.threads_traced += 1
    finally:
        _ours.busy = False


def _audit(event: str, args: tuple) -> None:
    """Interpreter-wide (every thread, and it cannot be removed): what can hide work from the
    window. Does nothing while no window is open."""
    window = _window
    if window is None or window.closed or getattr(_ours, "busy", False):
        return
    if event in ("sys.setprofile", "sys.settrace"):
        caller = sys._getframe(1).f_code
        if (
            event == "sys.setprofile"
            and caller is _BOOTSTRAP
            and threading._profile_hook is _thread_starts
        ):
            return  # threading starting a thread: the window's own starter
        window.note(f"{event} was called while the window was open")
    elif event.startswith("ctypes."):
        window.note(f"ctypes was used while the window was open ({event})")
    elif event.startswith(PROCESS_EVENTS):
        if len(window.started) < EVIDENCE:
            window.started.append(event)


def _install_audit_hook() -> None:
    global _audit_installed
    if not _audit_installed:
        sys.addaudithook(_audit)
        _audit_installed = True


def start_window(nonce: str = "") -> _Window:
    """Open a window in this process (the kernel's, or a test's). Every record says how many
    windows the process has opened: the grader knows how many it asked for, so a window the
    notebook closed and opened again itself (with the nonce its hooks can read) shows."""
    global _window, _opened
    if _window is not None and not _window.closed:
        _window.stop()
    _opened += 1
    _window = _Window(nonce)
    _window.start()
    return _window


def stop_window() -> dict:
    """Close the open window and return its record (no window: an empty, disturbed one)."""
    global _window
    window, _window = _window, None
    if window is None or window.closed:
        return {
            "nonce": "",
            "opened": _opened,
            "ops": [],
            "calls": [],
            "cut": False,
            "intact": False,
            "disturbed": ["no window was open"],
            "processes": [],
            "started": [],
            "threads": 0,
        }
    return window.stop()


# ------------------------------------------------------------------ the kernel's side


def open_window(nonce: str) -> None:
    """The grader's request before a test cell with rules."""
    start_window(nonce)


def close_window(nonce: str, task: str) -> None:
    """The grader's request after it: display the window's record."""
    from IPython.display import display

    from .capture import MIME

    record = stop_window()
    if record["nonce"] != nonce:
        record["disturbed"] = [*record["disturbed"], "the window was opened by another request"][
            :EVIDENCE
        ]
        record["intact"] = False
    display({MIME: {"task": task[:100], "kind": "window", **record}}, raw=True)


def request(kind: str, nonce: str, task: str = "") -> str:
    """The source of the grader's request `kind` ("open" or "close"): one expression that binds no
    name in the student's namespace."""
    module = "__import__('seqmodels.grading.trace_window', fromlist=['_'])"
    if kind == "open":
        return f"{module}.open_window({nonce!r})"
    return f"{module}.close_window({nonce!r}, {task!r})"


# ------------------------------------------------------------------ the grader's side


def reasons(window: dict | None, rules: list, shown: int = 12) -> list[str]:
    """Why a task with `rules` is held for review, from the record of the window around its test
    cell (`window`; None if no valid record came back). Empty: nothing says it broke a rule."""
    from .rules import opaque, untraced

    def names(found) -> str:
        return ", ".join(f"`{n}`" for n in sorted(set(found))[:shown])

    if window is None:
        return ["no trace of the test cell came back (its trace window is missing or invalid)"]
    out = []
    if window["cut"]:
        out.append(
            f"the trace reached its limit of {LIMIT:,} names, so it could not keep everything "
            "that ran"
        )
    if not window["intact"]:
        why = "; ".join(window["disturbed"][:shown]) or "no profiler could be installed"
        out.append(f"the trace was disturbed while the test cell ran: {why}")
    if window["processes"]:
        out.append(
            "other processes were alive beside the kernel, and what they run is not traced: "
            + names(window["processes"])
        )
    if window["started"] or untraced(window["calls"]):
        out.append(
            "the test cell started another process, whose calls the trace cannot see: "
            + names([*window["started"], *untraced(window["calls"])])
        )
    if window["ops"] or opaque(window["calls"]):
        out.append(
            "the test cell ran compiled code (TorchScript or torch.compile), whose operators the "
            "trace cannot see: " + names([*window["ops"], *opaque(window["calls"])])
        )
    for rule in rules:
        if found := rule.matches([], window["calls"]):
            out.append(f"the test cell ran {names(found)}: {rule.title}, which this task forbids")
    return out
