"""Submissions that dodged PS4's `masked_token_nll` rule (no torch losses) before the trace window
(issue 27), honest ones that must stay unflagged, and `grade_teacher_forcing`, which grades one.

(The dodges were written against PS4's earlier `teacher_forcing` task, whose `masked_token_nll` the
rebuilt set keeps as Task 3, with the same rule: `CASES` and `POINTS` are that task's.)

A helper for tests/test_grading_forbidden.py (not a test module itself). Each dodge computes
`masked_token_nll` with `F.cross_entropy` and returned right values, so it earned full points:

- `CUT`: 2,100 fresh no-op functions and 2,100 `record_function` labels first, so the per-case
  trace's first 2,000 sorted names no longer held the loss; `CUT_PAST_THE_LIMIT` makes more distinct
  names than the window keeps;
- `SIDESTEP`: a worker thread started in the answer cell does the work the graded call queues;
- `HOOK`: a ``pre_run_cell`` hook runs the test cell's code (hidden cases included) before it, with
  the forbidden loss, and the graded function looks the results up;
- `SETTRACE`: a trace function set in the answer cell computes the loss when the graded function is
  called (code a trace function runs is invisible to profilers);
- `PROCESS`: a process started in the answer cell computes it;
- `REOPEN`: a ``pre_run_cell`` hook closes the grader's window and opens another with the nonce
  the opening request carried (work between the two would go untraced).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import nbformat

from ps4_submissions import _ANSWERS

ROOT = Path(__file__).resolve().parents[1]
SOL = _ANSWERS["masked_token_nll"]
#: the cases of the task the dodges answer, and its points
CASES, POINTS = 10, 1
TORCH_LOSS = """

def _torch_loss(logits, targets, mask):
    return torch.nn.functional.cross_entropy(logits[mask], targets[mask])
"""
CUT_PAST_THE_LIMIT = (
    SOL
    + TORCH_LOSS
    + """

_noise = {}
exec("\\n".join(f"def _f{i}():\\n    pass" for i in range(21_000)), _noise)


def masked_token_nll(logits, targets, mask):
    for f in list(_noise.values())[1:]:
        f()
    return _torch_loss(logits, targets, mask)
"""
)
CUT = (
    SOL
    + TORCH_LOSS
    + """

_noise = {}
exec("\\n".join(f"def _f{i}():\\n    pass" for i in range(2100)), _noise)


def masked_token_nll(logits, targets, mask):
    for i in range(2100):
        _noise[f"_f{i}"]()
        with torch.autograd.profiler.record_function(f"label_{i}"):
            pass
    return _torch_loss(logits, targets, mask)
"""
)
SIDESTEP = (
    SOL
    + TORCH_LOSS
    + """

import queue, threading
_jobs, _results = queue.Queue(), queue.Queue()


def _worker():
    while True:
        args = _jobs.get()
        _results.put(_torch_loss(*args))


threading.Thread(target=_worker, daemon=True).start()


def masked_token_nll(logits, targets, mask):
    _jobs.put((logits, targets, mask))
    return _results.get()
"""
)
HOOK = (
    SOL
    + TORCH_LOSS
    + """

from IPython import get_ipython

_table = {}


def _key(args):
    return repr([a.tolist() for a in args])


def _precompute(info):
    if "masked_token_nll" not in (info.raw_cell or ""):
        return
    space = dict(globals())
    space["masked_token_nll"] = lambda *a: _table.setdefault(_key(a), _torch_loss(*a))
    space["Checker"] = None
    try:
        source = info.raw_cell.replace("from seqmodels.grading import Checker", "")
        class _C:
            def __init__(self, *a, **k): pass
            def case(self, name, compute, *a, **k):
                try: compute()
                except Exception: pass
            def done(self): pass
        space["Checker"] = _C
        exec(source, space)
    except Exception:
        pass


get_ipython().events.register("pre_run_cell", _precompute)
_solution_nll = masked_token_nll


def masked_token_nll(logits, targets, mask):
    found = _table.get(_key((logits, targets, mask)))
    if logits.requires_grad:  # a looked-up value has no graph: the gradient case gets the honest one
        return _solution_nll(logits, targets, mask)
    return found if found is not None else _solution_nll(logits, targets, mask) * 0
"""
)
SETTRACE = (
    SOL
    + TORCH_LOSS
    + """

import sys
_stash = []


def _tracer(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "masked_token_nll":
        loc = frame.f_locals
        _stash.append(_torch_loss(loc["logits"], loc["targets"], loc["mask"]))
    return None


sys.settrace(_tracer)


def masked_token_nll(logits, targets, mask):
    return _stash.pop()
"""
)
REOPEN = (
    HOOK
    + """

from seqmodels.grading import trace_window as _tw

get_ipython().events.unregister("pre_run_cell", _precompute)


def _reopen(info):
    window = _tw._window
    if window is None or "masked_token_nll" not in (info.raw_cell or ""):
        return _precompute(info)
    _tw.stop_window()  # the grader's window, closed by the notebook
    _precompute(info)  # untraced
    _tw.start_window(window.nonce)  # the nonce its opening request carried


get_ipython().events.register("pre_run_cell", _reopen)
"""
)
PROCESS = (
    SOL.replace("def masked_token_nll(", "def _honest_nll(")
    + """

import multiprocessing as _mp

def _serve(conn):
    import torch
    while True:
        logits, targets, mask = conn.recv()
        conn.send(torch.nn.functional.cross_entropy(logits[mask], targets[mask]))

_here, _there = _mp.Pipe()
_mp.get_context("fork").Process(target=_serve, args=(_there,), daemon=True).start()


def masked_token_nll(logits, targets, mask):
    if logits.requires_grad:  # a tensor with a graph does not cross the pipe: the honest one
        return _honest_nll(logits, targets, mask)
    _here.send((logits, targets, mask))
    return _here.recv()
"""
)
HONEST_BEFORE = [
    """from tqdm.auto import tqdm
import threading, time
import torch.nn.functional as F
for _ in tqdm(range(3)):
    time.sleep(0.01)
_loader = torch.utils.data.DataLoader(torch.arange(64.0), batch_size=8, num_workers=2)
print(sum(float(b.sum()) for b in _loader))
from concurrent.futures import ThreadPoolExecutor
_pool = ThreadPoolExecutor(2)
print(list(_pool.map(lambda v: v * 2, range(4))))
""",
    """assert tqdm.monitor is not None and tqdm.monitor.is_alive()  # alive when the window opens
_l = torch.randn(2, 3, 5, dtype=torch.float64)
_t, _m = torch.randint(5, (2, 3)), torch.ones(2, 3, dtype=torch.bool)
torch.testing.assert_close(masked_token_nll(_l, _t, _m), F.cross_entropy(_l.reshape(-1, 5), _t.reshape(-1)))
print([t.name for t in threading.enumerate()])
""",
]
HONEST = (
    SOL.replace("def masked_token_nll(", "def _my_nll(")
    + """

_helpers = {}
exec("\\n".join(f"def _h{i}(x):\\n    return x" for i in range(2500)), _helpers)


def masked_token_nll(logits, targets, mask):
    for i in range(2500):
        logits = _helpers[f"_h{i}"](logits)
    return _pool.submit(_my_nll, logits, targets, mask).result()
"""
)


def grade_teacher_forcing(answer: str, before_test=(), sandbox: str = "none"):
    """Grade PS4's set-up cell, `answer` as the `masked_token_nll` answer cell, the cells
    `before_test`, and the test cell (hidden cases included), as `make grade` does (`GuardedExecute`
    then `JudgeCaptures`, with the stored references). Returns (points, held for review, the
    grader's texts in the test cell, the window's record, seconds, the grader's texts in the
    other cells)."""
    from seqmodels.grading.preprocessors import GuardedExecute, JudgeCaptures, state

    source = nbformat.read(ROOT / "solutions" / "ps4" / "ps4.ipynb", as_version=4)
    setup, _, test = (copy.deepcopy(source.cells[i]) for i in (1, 9, 10))
    assert test.metadata["nbgrader"]["grade_id"] == "test_masked_token_nll"
    answer_cell = copy.deepcopy(source.cells[9])
    answer_cell.source = answer
    extra = [nbformat.v4.new_code_cell(code) for code in before_test]
    nb = nbformat.v4.new_notebook(cells=[setup, answer_cell, *extra, test])
    nb.metadata = source.metadata
    resources = {"nbgrader": {"assignment": "ps4", "notebook": "ps4"}, "metadata": {"path": "/tmp"}}
    references = str(ROOT / "solutions")
    start = time.monotonic()
    GuardedExecute(sandbox=sandbox, references_root=references).preprocess(nb, resources)
    window = state(resources).get("windows", {}).get("test_masked_token_nll")
    JudgeCaptures(references_root=references).preprocess(nb, resources)
    points, review = state(resources)["scores"]["test_masked_token_nll"]
    seconds = time.monotonic() - start
    texts = [[o.get("data", {}).get("text/plain", "") for o in c.outputs] for c in nb.cells]
    other = "\n".join(t for cell in texts[:-1] for t in cell)
    return points, review, "\n".join(texts[-1]), window, seconds, other
