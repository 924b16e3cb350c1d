"""What a task may forbid (``Checker(..., forbidden=[rule names])``), and how the grader tells.

The verdict on a rule comes from what ran: the grader opens a trace window
(`seqmodels.grading.trace_window`) around the whole test cell of a task with rules — the Python and
C functions called in every thread, TorchScript run, processes, what could hide work — and matches
it against the rules of `seqmodels.grading.rules` in its own process. A match — or a missing, cut
or disturbed window, or another process — holds the task for the instructor's review. The static
reading of names (`seqmodels.grading.static_reading`) is only supporting evidence: it never flags by
itself. The dodges that earned full points before the window (issue 27) are graded for real at the
end (tests/ps4_dodges.py).
"""

import queue
import sys
import textwrap
import threading

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

import ps4_dodges as dodges
from seqmodels.grading import trace_window
from seqmodels.grading.capture import MIME, Checker
from seqmodels.grading.preprocessors import JudgeCaptures
from seqmodels.grading.rules import RULES
from seqmodels.grading.static_reading import _forbidden_names, evidence
from seqmodels.grading.trace_window import start_window, stop_window

Q = torch.randn(2, 3, 4, dtype=torch.float64)


def _run(source: str, call: str) -> list[str]:
    """Define the student's code in a fresh namespace, run `call` in a trace window, and return
    which rules the window matches (name: first match)."""
    namespace = {"torch": torch, "Q": Q}
    exec(textwrap.dedent(source), namespace)  # noqa: S102 - test submissions of our own
    start_window()
    try:
        exec(call, namespace)  # noqa: S102
    finally:
        record = stop_window()
    assert record["intact"] and not record["cut"], record["disturbed"]
    return sorted(name for name, rule in RULES.items() if rule.matches([], record["calls"]))


SDPA_FILE = r"""
import importlib, pathlib, sys
pathlib.Path(TMP, "helper_attention.py").write_text(
    "import torch.nn.functional as F\n"
    "def attend(q, k, v):\n"
    "    return F.scaled_dot_product_attention(q, k, v)\n"
)
sys.path.insert(0, TMP)
attend = importlib.import_module("helper_attention").attend
"""

# each route around a name-matching rule that earned a forbidden task in full before (issue 19)
BYPASSES = {
    "a later cell rebinds masked_token_nll to F.cross_entropy": (
        "import torch.nn.functional as F\nmasked_token_nll = F.cross_entropy\n",
        "masked_token_nll(Q[0], torch.tensor([0, 1, 2]))",
        "torch_losses",
    ),
    "lstm_forward is an object whose __call__ runs nn.LSTM": (
        """
        class _L:
            def __call__(self, x):
                return torch.nn.LSTM(4, 5, batch_first=True).double()(x)
        lstm_forward = _L()
        """,
        "lstm_forward(Q)",
        "torch_lstm",
    ),
    "a written .py file calls scaled_dot_product_attention": (
        SDPA_FILE,
        "attend(Q, Q, Q)",
        "torch_attention",
    ),
    "softmax_cross_entropy rebound to autograd under inference_mode(False)": (
        """
        def softmax_cross_entropy(z, y):
            with torch.inference_mode(False), torch.enable_grad():
                z = z.clone().requires_grad_()
                loss = torch.nn.functional.log_softmax(z, -1)[0, y[0]].neg()
                loss.backward()
                return loss.detach(), z.grad
        """,
        "with torch.inference_mode():\n    softmax_cross_entropy(Q[0], torch.tensor([1]))",
        "autograd",
    ),
    "torch.func.grad": (
        "import torch.func\ng = torch.func.grad(lambda x: (x**2).sum())\n",
        "g(Q)",
        "autograd",
    ),
    "forward-mode autograd (jvp)": (
        "import torch.func\n",
        "torch.func.jvp(torch.sin, (Q,), (torch.ones_like(Q),))",
        "autograd",
    ),
    "attention found among nn.Module's subclasses": (
        """
        def find(base, name):
            for c in base.__subclasses__():
                if c.__name__ == name:
                    return c
                if (found := find(c, name)) is not None:
                    return found
        mha = find(torch.nn.Module, "Multihead" + "Attention")(4, 2, batch_first=True).double()
        """,
        "mha(Q, Q, Q)",
        "torch_attention",
    ),
    "torch's private attention kernel": (
        "",
        "torch._scaled_dot_product_attention_math(Q, Q, Q)",
        "torch_attention",
    ),
    "attention run in a thread of its own": (
        "import threading, torch.nn.functional as F\n",
        "t = threading.Thread(target=F.scaled_dot_product_attention, args=(Q, Q, Q))\n"
        "t.start(); t.join()",
        "torch_attention",
    ),
    "torch's clipping": (
        "",
        "torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(Q.clone())], 1.0)",
        "gradient_clipping",
    ),
    "torch's Adam": (
        "",
        "p = torch.nn.Parameter(Q.clone()); p.grad = torch.ones_like(p)\n"
        "torch.optim.Adam([p], lr=0.1).step()",
        "torch_optimizers",
    ),
    "torch's Adam found by name among the optimisers": (
        "import importlib\n",
        "p = torch.nn.Parameter(Q.clone()); p.grad = torch.ones_like(p)\n"
        "getattr(importlib.import_module('torch.' + 'optim'), 'Ad' + 'am')([p]).step()",
        "torch_optimizers",
    ),
    "difflib's matcher": (
        "import difflib\n",
        "difflib.SequenceMatcher(None, 'kat', 'cat').ratio()",
        "edit_distance_libraries",
    ),
}


@pytest.mark.parametrize("route", sorted(BYPASSES))
def test_every_route_to_a_forbidden_tool_shows_in_the_trace(route, tmp_path):
    source, call, rule = BYPASSES[route]
    assert rule in _run(source.replace("TMP", repr(str(tmp_path))), call)


# what honest students wrote that the name matching flagged (issue 19): nothing of it runs a rule
HONEST = {
    "a local variable named cross_entropy": (
        """
        def masked_token_nll(logits, targets):
            cross_entropy = -torch.log_softmax(logits, -1).gather(-1, targets[:, None])
            return cross_entropy.mean()
        """,
        "masked_token_nll(Q[0], torch.tensor([0, 1, 2]))",
    ),
    "a variable named gc": (
        "def f(x):\n    gc = x.sum()\n    return gc\n",
        "f(Q)",
    ),
    "torch.no_grad and inference_mode inside the function": (
        "def f(x):\n    with torch.no_grad(), torch.inference_mode():\n        return x * 2\n",
        "f(Q)",
    ),
    "Adam written by hand, its state in a dict named optimizer": (
        """
        def adam_step(params, grads, optimizer, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
            optimizer["t"] = t = optimizer.get("t", 0) + 1
            for name, g in grads.items():
                m = optimizer.setdefault("m_" + name, torch.zeros_like(g))
                v = optimizer.setdefault("v_" + name, torch.zeros_like(g))
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                params[name] -= lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
        """,
        "adam_step({'w': Q.clone()}, {'w': torch.ones_like(Q)}, {})",
    ),
    "hand-written attention, a check against SDPA run outside the graded call": (
        """
        import math
        def attend(q, k, v):
            return torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), -1) @ v
        torch.testing.assert_close(
            attend(Q, Q, Q), torch.nn.functional.scaled_dot_product_attention(Q, Q, Q)
        )
        x = torch.ones(2, requires_grad=True)
        (x * x).sum().backward()  # a side check of its own, outside the graded call
        """,
        "attend(Q, Q, Q)",
    ),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_honest_code_matches_no_rule(case):
    assert _run(*HONEST[case]) == []


def test_a_disturbed_trace_is_reported():
    start_window()
    sys.setprofile(None)  # what code that hides its calls would do
    record = stop_window()
    assert not record["intact"] and "sys.setprofile was called" in record["disturbed"][0]


def _window(**fields) -> dict:
    return {
        "task": "t",
        "kind": "window",
        "nonce": "n",
        "ops": [],
        "calls": ["__main__.f"],
        "cut": False,
        "intact": True,
        "disturbed": [],
        "processes": [],
        "started": [],
        "threads": 3,
        **fields,
    }


def _records(origins: dict | None = None) -> list[dict]:
    start = {"task": "t", "kind": "start", "origins": origins or {"f": "__main__:<cell>"}}
    return [start, {"task": "t", "kind": "case", "case": "c1", "data": ""}]


TASK = {"functions": ["f"], "forbidden": ["torch_attention"], "cases": ["c1"], "points": 2}


@pytest.mark.parametrize(
    "window, reason",
    [
        (
            _window(calls=["torch._scaled_dot_product_attention_math"]),
            "ran `torch._scaled_dot_product_attention_math`: torch's attention",
        ),
        (
            _window(calls=["torch.nn.functional.multi_head_attention_forward"]),
            "torch.nn.functional.multi_head_attention_forward",
        ),
        (None, "no trace of the test cell came back"),
        (_window(cut=True), "reached its limit"),
        (_window(intact=False, disturbed=["sys.settrace was called"]), "sys.settrace was called"),
        (_window(processes=["12 python"]), "other processes were alive"),
        (_window(started=["os.fork"]), "started another process"),
        (_window(calls=["_posixsubprocess.fork_exec"]), "started another process"),
        (_window(ops=["__torch__.f"]), "compiled code"),
        (_window(calls=["torch._dynamo.eval_frame.OptimizedModule.__call__"]), "compiled code"),
    ],
)
def test_the_grader_holds_a_task_for_review_on_what_ran(window, reason):
    reasons = JudgeCaptures()._reasons(TASK, _records(), window)
    assert len(reasons) == 1 and reason in reasons[0], reasons


def test_dynamo_turned_off_around_torch_optims_step_is_not_compiled_code():
    """What `torch.optim.Adam.step` runs under `torch._disable_dynamo` (measured with torch 2.13),
    against what a function compiled with `torch.compile(backend="eager")` runs."""
    adam = [
        "torch._dynamo.eval_frame.DisableContext.__call__.<locals>._fn",
        "torch._dynamo.eval_frame.DisableContext.__init__",
        "torch._dynamo.eval_frame._TorchDynamoContext.__init__",
        "torch._dynamo.eval_frame._callback_from_stance",
        "torch._dynamo.eval_frame.innermost_backend",
        "torch._dynamo.eval_frame.innermost_fn",
        "torch._dynamo.eval_frame.nothing",
    ]
    assert JudgeCaptures()._reasons(TASK, _records(), _window(calls=adam)) == []
    compiled = [
        *adam,
        "torch._dynamo.eval_frame.OptimizeContext.__init__.<locals>.on_enter",
        "torch._dynamo.eval_frame._TorchDynamoContext.__call__.<locals>.compile_wrapper",
    ]
    reasons = JudgeCaptures()._reasons(TASK, _records(), _window(calls=compiled))
    assert len(reasons) == 1 and "compiled code" in reasons[0], reasons


def test_a_clean_window_or_a_task_without_rules_is_not_held():
    clean = _window(calls=["torch._VariableFunctionsClass.bmm", "torch.softmax", "__main__.f"])
    assert JudgeCaptures()._reasons(TASK, _records(), clean) == []
    assert JudgeCaptures()._reasons({**TASK, "forbidden": []}, _records(), None) == []


def test_the_course_librarys_implementation_is_held_too():
    reasons = JudgeCaptures()._reasons(TASK, _records({"f": "seqmodels.x:/x.py"}), _window())
    assert reasons == ["`f` is the course library's `seqmodels.x`, not the student's own"]


def test_the_checker_records_rule_names_and_refuses_unknown_ones(monkeypatch):
    shown = []
    monkeypatch.setattr("seqmodels.grading.capture.display", lambda data, raw: shown.append(data))
    InteractiveShell.instance()
    Checker("plain", functions=["f"])
    check = Checker("by_hand", functions=["f"], forbidden=["autograd"])
    assert "forbidden" not in shown[0][MIME]  # PS1's manifests stay as they were
    assert shown[1][MIME]["forbidden"] == ["autograd"]
    check.case("one", lambda: torch.ones(2) * 2)
    assert "trace" not in shown[2][MIME]  # the grader's window traces the whole test cell
    with pytest.raises(ValueError, match="unknown rule"):
        Checker("typo", forbidden=["autograd", "torch.autograd"])


def test_static_evidence_reads_the_helpers_of_a_graded_function():
    graded = "def grad_of(x):\n    return helper(x)\n"
    helper = "import torch\nhelper = torch.func.grad(lambda v: (v**2).sum())\n"
    scratch = "x = torch.ones(2, requires_grad=True)\n(x**2).sum().backward()\n"
    found = evidence(["grad_of"], [graded, helper, scratch], list(RULES["autograd"].names))
    assert found == ["the code of `grad_of` (or a helper it uses) names `torch.func`"]


NO_AUTOGRAD = [
    "torch.autograd",
    "torch.func",
    "backward",
    "autograd",
    "requires_grad",
    "requires_grad_",
]


@pytest.mark.parametrize(
    "source, found",
    [
        ("def f(x):\n    y.backward()\n", ["backward"]),
        (
            "import torch\ndef f(x):\n    return torch.autograd.grad(y, x)\n",
            ["autograd", "torch.autograd"],
        ),
        ("from torch.autograd import grad\n", ["autograd", "torch.autograd"]),
        ("from torch import autograd as ag\n", ["autograd", "torch.autograd"]),
        ("import torch.func\n", ["torch.func"]),
        ("from torch.func import vjp\n", ["torch.func"]),
        (
            "def f(x):\n    x.requires_grad_(); x.requires_grad = True\n",
            ["requires_grad", "requires_grad_"],
        ),
    ],
)
def test_forbidden_modules_attributes_and_names_are_found(source, found):
    assert _forbidden_names(source, NO_AUTOGRAD) == found


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    # no .backward() or torch.autograd here\n    return 'autograd'\n",
        "def f(func, grad_y):\n    return func(grad_y)\n",  # 'func' and 'grad' are ordinary names
        "def f(x):\n    return x.func\n",  # torch.func is a dotted entry: x.func is not it
        "this is not python (",
    ],
)
def test_words_in_strings_comments_or_unrelated_names_are_not_flagged(source):
    assert _forbidden_names(source, NO_AUTOGRAD) == []


@pytest.mark.parametrize(
    "source",
    [
        "import torch as T\n\ndef f(x):\n    return T.func.grad(g)(x)\n",
        "import torch.func as tf\n\ndef f(x):\n    return tf.grad(g)(x)\n",
        "import torch\nF = torch.func\n\ndef f(x):\n    return F.vjp(g, x)\n",
        "from torch import func\n\ndef f(x):\n    return func.grad(g)(x)\n",
    ],
)
def test_aliases_of_a_forbidden_module_are_seen_through(source):
    assert "torch.func" in _forbidden_names(source, NO_AUTOGRAD)


@pytest.mark.parametrize(
    "source, found",
    [
        (  # returns attention's context and weights: Task 1 of PS4 and PS5 in one call
            "import torch\ndef f(q, k, v):\n    return torch._scaled_dot_product_attention_math(q, k, v)\n",
            ["torch._scaled_dot_product_attention_math"],
        ),
        (
            "import torch as T\ndef f(x):\n    return T._native_multi_head_attention(x)\n",
            ["torch._native_multi_head_attention"],
        ),
        (
            "from torch import _scaled_dot_product_attention_math as m\n",
            ["torch._scaled_dot_product_attention_math"],
        ),
        (
            "import torch.nn.functional as F\ndef f(x):\n    return F._canonical_mask(x)\n",
            ["torch.nn.functional._canonical_mask"],
        ),
        # a tensor's own private attribute, and dunders, are not torch's private API
        ("import torch\ndef f(x):\n    return x._version, torch.__version__\n", []),
    ],
)
def test_torchs_private_api_is_forbidden_with_anything(source, found):
    from seqmodels.grading.static_reading import DYNAMIC_LOOKUPS

    assert "torch._*" in DYNAMIC_LOOKUPS
    assert _forbidden_names(source, ["torch._*"]) == found


def test_walking_the_class_tree_to_a_forbidden_class_is_flagged():
    """``nn.Module.__subclasses__()`` searched for ``"Multihead" + "Attention"`` reaches
    ``nn.MultiheadAttention`` without naming it (it earned full marks in PS5's Task 2 before)."""
    from seqmodels.grading.static_reading import DYNAMIC_LOOKUPS

    source = (
        "import torch\n"
        "def find(base, name):\n"
        "    for c in base.__subclasses__():\n"
        "        if c.__name__ == name:\n"
        "            return c\n"
        "        if (found := find(c, name)) is not None:\n"
        "            return found\n"
        "def f():\n"
        "    return find(torch.nn.Module, 'Multihead' + 'Attention')\n"
    )
    assert _forbidden_names(source, ["MultiheadAttention", *DYNAMIC_LOOKUPS]) == ["__subclasses__"]
    assert _forbidden_names("import gc\ndef f():\n    return gc.get_objects()\n", ["gc"]) == ["gc"]


# ------------------------------------------------------------------ the trace window itself


def test_a_thread_started_before_the_window_is_traced():
    """The sidestep: a worker thread started earlier does the work the graded call queues."""
    jobs, results = queue.Queue(), queue.Queue()

    def work():
        while (job := jobs.get()) is not None:
            results.put(job())

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    start_window()
    jobs.put(lambda: torch.nn.functional.cross_entropy(Q[0], torch.tensor([0, 1, 2])))
    results.get(timeout=60)
    record = stop_window()
    jobs.put(None)
    worker.join()
    assert record["intact"], record["disturbed"]
    assert RULES["torch_losses"].matches([], record["calls"])


def test_a_thread_started_inside_the_window_is_traced_and_one_that_skips_threading_is_noticed():
    import _thread

    start_window()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    thread = threading.Thread(target=sdpa, args=(Q, Q, Q))
    thread.start()
    thread.join()
    record = stop_window()
    assert record["intact"], record["disturbed"]
    assert "torch._C._nn.scaled_dot_product_attention" in record["calls"]
    done = threading.Event()
    start_window()
    _thread.start_new_thread(lambda: (torch.ones(1) * 2, done.set()), ())  # no threading bootstrap
    done.wait(10)
    record = stop_window()
    assert not record["intact"], record


def test_a_window_cut_at_its_limit_says_so(monkeypatch):
    """The cut: more distinct names than the window keeps. (The limit is lowered here to keep the
    test quick; tests/ps4_dodges.py's CUT_PAST_THE_LIMIT goes past the real one in a kernel.)"""
    monkeypatch.setattr(trace_window, "LIMIT", 500)
    noise: dict = {}
    exec("\n".join(f"def f{i}():\n    pass" for i in range(600)), noise)  # noqa: S102
    start_window()
    for i in range(600):
        noise[f"f{i}"]()
    record = stop_window()
    assert record["cut"] and len(record["calls"]) == 500


def test_a_trace_function_ctypes_or_a_torchscript_call_in_the_window_is_reported():
    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        start_window()
        record = stop_window()
    finally:
        sys.settrace(None)
    assert "trace function" in record["disturbed"][0]
    import ctypes

    start_window()
    ctypes.pythonapi.Py_GetVersion  # noqa: B018 - a ctypes lookup (dlsym), as a tamperer makes
    record = stop_window()
    assert any("ctypes" in reason for reason in record["disturbed"]), record["disturbed"]

    def relu(x):
        return torch.nn.functional.relu(x)

    scripted = torch.jit.script(relu)  # compiled outside the window, run inside it
    start_window()
    scripted(Q)
    record = stop_window()
    assert record["ops"] and record["intact"], record


def test_names_are_read_from_the_profilers_descriptions():
    assert trace_window.name_of("<built-in method torch._C._nn.cross_entropy_loss>") == (
        "torch._C._nn.cross_entropy_loss"
    )
    assert trace_window.name_of("<method 'run_backward' of 'torch._C._EngineBase' objects>") == (
        "torch._C._EngineBase.run_backward"
    )
    assert trace_window.name_of("<built-in method __new__ of type object at 0x7f00>") == (
        "type.__new__"
    )
    assert trace_window.module_of("/v/lib/python3.11/site-packages/torch/nn/functional.py") == (
        "torch.nn.functional"
    )
    assert trace_window.module_of("/usr/lib/python3.11/difflib.py") == "difflib"
    assert trace_window.module_of("/run/course/seqmodels/grading/__init__.py") == (
        "seqmodels.grading"
    )


# ------------------------------------------------------------------ the dodges, graded for real

# each earned PS4's teacher_forcing (now masked_token_nll) in full before the trace window (issue 27)
DODGES = {
    "cut: 2,100 fresh functions and record_function labels first": dodges.CUT,
    "cut: more distinct names than the window keeps": dodges.CUT_PAST_THE_LIMIT,
    "sidestepped: a worker thread started in the answer cell": dodges.SIDESTEP,
    "precomputed: a pre_run_cell hook runs the test cell's code first": dodges.HOOK,
    "precomputed: a trace function set in the answer cell": dodges.SETTRACE,
    "sidestepped: a process started in the answer cell": dodges.PROCESS,
    "reopened: a hook closes the grader's window, precomputes, opens another": dodges.REOPEN,
}


@pytest.mark.grading
@pytest.mark.parametrize("dodge", sorted(DODGES))
def test_every_dodge_of_a_rule_is_held_for_review(dodge):
    points, review, text, window, _, _ = dodges.grade_teacher_forcing(DODGES[dodge])
    assert review and points == 0, text
    cases = f"{dodges.CASES} of {dodges.CASES} cases passed"
    assert "held for review" in text and cases in text, text


@pytest.mark.grading
def test_threads_tqdm_a_dataloader_helpers_and_a_check_of_its_own_are_not_flagged():
    """An honest notebook: a tqdm bar (its monitor thread alive when the window opens), a DataLoader
    with two worker processes and a thread pool in cells of its own, a comparison with
    F.cross_entropy in a cell of its own, and a graded function that calls 2,500 helpers and does
    its work in the thread pool started earlier."""
    points, review, text, window, _, other = dodges.grade_teacher_forcing(
        dodges.HONEST, dodges.HONEST_BEFORE
    )
    assert "raised" not in other, other
    assert (points, review) == (dodges.POINTS, False), text
    assert window["intact"] and not window["cut"] and not window["processes"]
    assert any(name.endswith("._my_nll") for name in window["calls"])  # run by the pool's threads
