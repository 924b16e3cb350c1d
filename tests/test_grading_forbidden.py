"""What a task may forbid its graded functions to use (``Checker(..., forbidden=[...])``).

A by-hand gradient task forbids autograd; the solution's run stores the list in the references'
manifest, and the grader flags a graded function whose defining code names a forbidden module,
attribute path or identifier (words in strings and comments do not count). Detection only: code
that builds the name at run time (``getattr(torch, "auto" + "grad")``) cannot be followed, so every
task that forbids anything also forbids the ways of building one (``DYNAMIC_LOOKUPS``: getattr,
importlib, ``__dict__``, ``sys.modules``, ...), and by-hand gradient tasks also run their cases
under ``torch.inference_mode()``.
"""

import pytest
from IPython.core.interactiveshell import InteractiveShell

from seqmodels.grading.capture import MIME, Checker
from seqmodels.grading.preprocessors import JudgeCaptures, _forbidden_names

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


def test_a_forbidden_use_costs_the_task_and_is_named_in_the_flag():
    judge = JudgeCaptures()
    cheat = (
        "def grad_of(x):\n    x.requires_grad_()\n    (x**2).sum().backward()\n    return x.grad\n"
    )
    honest = "def grad_of(x):\n    return 2 * x\n"
    origins = {"grad_of": "__main__:<cell>"}
    flags = judge._flags(["grad_of"], origins, [cheat], NO_AUTOGRAD)
    assert flags == [
        "`grad_of` uses `backward`, which this task forbids",
        "`grad_of` uses `requires_grad_`, which this task forbids",
    ]
    assert judge._flags(["grad_of"], origins, [honest], NO_AUTOGRAD) == []
    assert judge._flags(["grad_of"], origins, [cheat]) == []  # a task that forbids nothing


@pytest.mark.parametrize(
    "cheat, flagged",
    [
        ('import importlib\ng = importlib.import_module("torch." + "func").grad\n', "importlib"),
        ('import torch\ng = torch.__dict__["fu" + "nc"].grad\n', "__dict__"),
        ('import sys\ng = sys.modules["torch.f" + "unc"].grad\n', "sys.modules"),
        ('from operator import attrgetter\ng = attrgetter("func.grad")(torch)\n', "attrgetter"),
        ('g = __builtins__["get" + "attr"](torch, "func").grad\n', "__builtins__"),
        ('import inspect\ng = dict(inspect.getmembers(torch))["fu" + "nc"].grad\n', "inspect"),
    ],
)
def test_a_task_that_forbids_anything_forbids_run_time_look_ups_too(cheat, flagged):
    """A name built at run time hides what it reaches from a static reading, so every task with a
    list also forbids the ways of building one; a task that forbids nothing does not."""
    graded = cheat + "def grad_of(x):\n    return g(lambda v: (v**2).sum())(x)\n"
    judge = JudgeCaptures()
    flags = judge._flags(["grad_of"], {}, [graded], ["torch.func"])
    assert f"`grad_of` uses `{flagged}`, which this task forbids" in flags
    assert judge._flags(["grad_of"], {}, [graded]) == []


def test_the_checker_records_the_list_only_when_there_is_one(monkeypatch):
    shown = []
    monkeypatch.setattr("seqmodels.grading.capture.display", lambda data, raw: shown.append(data))
    InteractiveShell.instance()
    Checker("plain", functions=["f"])
    Checker("by_hand", functions=["f"], forbidden=["torch.func", "backward"])
    assert "forbidden" not in shown[0][MIME]  # PS1's manifests stay as they were
    assert shown[1][MIME]["forbidden"] == ["backward", "torch.func"]


GRADED = "def grad_of(x):\n    return helper(x)\n"


@pytest.mark.parametrize(
    "helper_cell",
    [
        "import torch\n\ndef helper(x):\n    return torch.func.grad(lambda v: (v**2).sum())(x)\n",
        "import torch\nhelper = torch.func.grad(lambda v: (v**2).sum())\n",
        "def helper(x):\n    return deeper(x)\n",  # and deeper, in a third cell, uses autograd
    ],
)
def test_a_helper_in_another_cell_is_read_too(helper_cell):
    deeper = "def deeper(x):\n    x.requires_grad_()\n    return x\n"
    flags = JudgeCaptures()._flags(["grad_of"], {}, [GRADED, helper_cell, deeper], NO_AUTOGRAD)
    assert flags and all("which this task forbids" in f for f in flags)


def test_a_scratch_cell_that_only_shares_imports_or_local_names_is_not_read():
    scratch = (
        "import torch\nx = torch.randn(3, requires_grad=True)\n(x**2).sum().backward()\n"
        "def helper(v):\n    return v\n"
    )
    graded = "import torch\n\ndef grad_of(x):\n    helper = 2\n    return helper * x\n"
    assert JudgeCaptures()._flags(["grad_of"], {}, [graded, scratch], NO_AUTOGRAD) == []


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


def test_an_alias_made_in_another_cell_is_seen_through():
    graded = "def grad_of(x):\n    return T.func.grad(g)(x)\n"
    flags = JudgeCaptures()._flags(["grad_of"], {}, [graded, "import torch as T\n"], NO_AUTOGRAD)
    assert flags == ["`grad_of` uses `torch.func`, which this task forbids"]


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
    from seqmodels.grading.preprocessors import DYNAMIC_LOOKUPS

    assert "torch._*" in DYNAMIC_LOOKUPS
    assert _forbidden_names(source, ["torch._*"]) == found


def test_walking_the_class_tree_to_a_forbidden_class_is_flagged():
    """``nn.Module.__subclasses__()`` searched for ``"Multihead" + "Attention"`` reaches
    ``nn.MultiheadAttention`` without naming it (it earned full marks in PS5's Task 2 before)."""
    from seqmodels.grading.preprocessors import DYNAMIC_LOOKUPS

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
