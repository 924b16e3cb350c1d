"""Problem Set 6's solutions against oracles, and its wrong answers, in process.

The solutions are the references, so they are checked here against oracles: the library's
byte-level tokenizer (`seqmodels.bytebpe`, itself held to HuggingFace `tokenizers` in
tests/test_bytebpe.py) for Tasks 1 and 2; a stack of PyTorch's `nn.TransformerEncoderLayer`
(``norm_first=True``, GELU, a causal mask) with copied weights, `F.layer_norm` and the tied output
for the GPT; `F.cross_entropy`, `clip_grad_norm_` and `torch.optim.AdamW` on that stack for the
trajectory. Then each plausible wrong answer of tests/ps6_submissions.py, graded in this process
against the stored references, loses points on its own task only and fails the case it is said to
fail, and each bug of the model costs the training step too. Last, the stored reference checkpoint
is the solution's: its model, its size within the cap, its tokenizer's merges the solution's own.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import grading_helpers as helpers
from ps1_submissions import solution_answers
from ps6_submissions import CASCADE_TASKS, CASCADES, KILLED_BY, WRONG
from seqmodels import bytebpe
from seqmodels.data import kjv_text

PS = "ps6"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
NOT_RUN_HERE = {"capstone_run", "d_experiment"}  # the student's run and part D
SKIP = ("capstone_train_cell", "d_experiment")
POINTS = {"train_byte_bpe": 2.5, "encode_decode": 1.5, "gpt_log_probs": 2.5, "train_step": 1.5}


def _cell(grade_id: str) -> str:
    source = nbformat.read(SOURCE, as_version=4)
    return next(
        c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.fixture(scope="module")
def ns():
    """The setup cell's names and the solution's answers (but the run and part D)."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_cell("setup"), "setup", "exec"), namespace)  # noqa: S102 - our own solution
    for name, code in solution_answers(nbformat.read(SOURCE, as_version=4)).items():
        if name not in NOT_RUN_HERE:
            exec(compile(code, name, "exec"), namespace)  # noqa: S102
    namespace["device"] = torch.device("cpu")
    return namespace


def test_the_tokenizer_equals_the_librarys_on_the_kjv(ns):
    text = kjv_text("train")[:400_000]
    merges = ns["train_byte_bpe"](text, 300)
    assert merges == bytebpe.train(text, 300)
    held = kjv_text("validation")[:200_000] + "λόγος 😀\n"
    ids = ns["encode"](held, merges)
    assert ids == bytebpe.Tokenizer(merges).encode(held)
    assert ns["decode"](ids, merges) == held


def _oracle(params: dict, n_heads: int) -> nn.Module:
    """PyTorch's own pre-LN encoder layers with `params` copied in (causal by the mask)."""
    d = params["E"].shape[1]
    n_layers = sum(k.endswith(".Wqkv") for k in params)
    layers = nn.ModuleList(
        nn.TransformerEncoderLayer(
            d, n_heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        ).double()
        for _ in range(n_layers)
    )
    with torch.no_grad():
        for i, layer in enumerate(layers):
            p = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"L{i}.")}
            layer.self_attn.in_proj_weight.copy_(p["Wqkv"])
            layer.self_attn.in_proj_bias.copy_(p["bqkv"])
            layer.self_attn.out_proj.weight.copy_(p["Wo"])
            layer.self_attn.out_proj.bias.copy_(p["bo"])
            layer.norm1.weight.copy_(p["ln1.g"])
            layer.norm1.bias.copy_(p["ln1.b"])
            layer.norm2.weight.copy_(p["ln2.g"])
            layer.norm2.bias.copy_(p["ln2.b"])
            layer.linear1.weight.copy_(p["W1"])
            layer.linear1.bias.copy_(p["b1"])
            layer.linear2.weight.copy_(p["W2"])
            layer.linear2.bias.copy_(p["b2"])
    return layers


def _oracle_log_probs(layers, params, tokens):
    """The oracle's log-probabilities: `params` gives E, P and the final LayerNorm."""
    T = tokens.shape[1]
    x = params["E"][tokens] + params["P"][:T]
    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    for layer in layers:
        x = layer(x, src_mask=mask, is_causal=True)
    d = x.shape[-1]
    x = F.layer_norm(x, (d,), params["lnf.g"], params["lnf.b"], eps=1e-5)
    return F.log_softmax(x @ params["E"].T, dim=-1)


def _params(ns, seed, V=300, d=16, layers=2, max_len=12):
    g = torch.Generator().manual_seed(seed)
    p = ns["init_gpt_params"](V, d, layers, max_len, g, torch.float64)
    return {
        k: v + 0.05 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in p.items()
    }


@pytest.mark.parametrize(("H", "layers"), [(1, 1), (4, 2), (8, 3)])
def test_the_gpt_equals_pytorchs_pre_ln_encoder_layers_with_a_causal_mask(ns, H, layers):
    params = _params(ns, 10 + H, d=32 if H == 8 else 16, layers=layers)
    tokens = torch.randint(300, (3, 11), generator=torch.Generator().manual_seed(H))
    want = _oracle_log_probs(_oracle(params, H), params, tokens)
    torch.testing.assert_close(ns["gpt_log_probs"](params, tokens, H), want, rtol=1e-10, atol=1e-10)


def test_the_training_step_equals_adamw_on_the_oracle(ns):
    """Six steps of the solution's `train_step` against PyTorch's layers trained with
    `F.cross_entropy`, the global `clip_grad_norm_` and `torch.optim.AdamW` (the embeddings, the
    positions and the final LayerNorm as parameters beside the layers')."""
    params = _params(ns, 3)
    theirs = {k: v.clone().requires_grad_() for k, v in params.items()}
    layers = _oracle(params, 4)
    outer = {k: nn.Parameter(params[k].clone()) for k in ("E", "P", "lnf.g", "lnf.b")}
    oracle_params = [*outer.values(), *layers.parameters()]
    opt_theirs = torch.optim.AdamW(theirs.values(), lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
    opt_oracle = torch.optim.AdamW(oracle_params, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
    batches = torch.randint(300, (6, 4, 9), generator=torch.Generator().manual_seed(4))
    for step, batch in enumerate(batches):
        lr = ns["learning_rate"](step, 6, 0.01, 2)
        got = ns["train_step"](theirs, opt_theirs, batch, lr, 0.5, 4)
        for group in opt_oracle.param_groups:
            group["lr"] = lr
        opt_oracle.zero_grad()
        out = _oracle_log_probs(layers, outer, batch[:, :-1])
        loss = F.cross_entropy(out.flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(oracle_params, 0.5)
        opt_oracle.step()
        assert got == pytest.approx(loss.item(), rel=1e-10)
    for k, v in outer.items():
        torch.testing.assert_close(theirs[k].detach(), v.detach(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        theirs["L1.Wqkv"].detach(),
        layers[1].self_attn.in_proj_weight.detach(),
        rtol=1e-9,
        atol=1e-9,
    )


@pytest.fixture(scope="module")
def solution_scores():
    answers = solution_answers(nbformat.read(SOURCE, as_version=4))
    return helpers.graded_in_process(PS, answers, skip=SKIP)


def test_the_solution_passes_every_case_in_process(solution_scores):
    scores, _ = solution_scores
    assert set(scores) == set(POINTS)
    assert all(passed == total for passed, total in scores.values()), scores


TEST_CELLS = {task: f"test_{task}" for task in POINTS}


def _only(*tasks: str) -> tuple[str, ...]:
    """The cells to skip so that only the test cells of `tasks` run (the others are graded with
    every wrong answer in the round trip, tests/test_grading_ps6.py)."""
    return (*SKIP, *(cell for task, cell in TEST_CELLS.items() if task not in tasks))


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_fails_the_case_it_is_said_to_fail(name):
    cell, code, _ = WRONG[name]
    task, case = KILLED_BY[name]
    answers = {**solution_answers(nbformat.read(SOURCE, as_version=4)), cell: code}
    _, verdicts = helpers.graded_in_process(PS, answers, skip=_only(task))
    assert not verdicts[task, case].passed, verdicts[task, case]


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_wrong_model_costs_its_task_and_the_training_step(name):
    cell, code, _ = CASCADES[name]
    answers = {**solution_answers(nbformat.read(SOURCE, as_version=4)), cell: code}
    scores, _ = helpers.graded_in_process(PS, answers, skip=_only(*CASCADE_TASKS))
    for task in CASCADE_TASKS:
        assert scores[task][0] < scores[task][1], (task, scores)


def test_the_reference_checkpoint_is_the_solutions_run(ns):
    folder = ROOT / "solutions" / PS / "references" / "submission"
    checkpoint = folder / "capstone.safetensors"
    assert checkpoint.stat().st_size <= 16 * 2**20
    params, merges, n_heads = ns["load_capstone"](checkpoint)
    assert n_heads == 4 and len(merges) == 768
    assert sum(v.numel() for v in params.values()) == 940_800
    # the merges are the solution's tokenizer on the training text (bytebpe: the same, faster)
    assert merges == bytebpe.train(kjv_text("train"), 768)
    windows = torch.tensor(bytebpe.Tokenizer(merges).encode(kjv_text("validation")[:20_000]))
    windows = windows[: 4 * 129].reshape(4, 129)
    nll = -ns["gpt_log_probs"](params, windows[:, :-1], 4).gather(-1, windows[:, 1:, None]).mean()
    assert math.isfinite(float(nll)) and float(nll) < 3.5  # nats a token: trained, not initial
