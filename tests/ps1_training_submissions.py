"""Part B (build and train) of Problem Set 1: plausible wrong training steps, and cheats.

`TRAJECTORY_BUGS` are `sgd_step` answers with one bug each; each is killed by a named check of the
trajectory task (B1), graded in the smoke profile. `TRAINING_CHEATS` replace an answer cell to game
the held-out tiers, graded in the full profile; each names the gate or tier that stops it.
"""

from __future__ import annotations

_HEAD = """def sgd_step(params, windows, lr, max_norm):
"""
_SPLIT = """    contexts, targets = windows[:, :-1], windows[:, -1]
"""
_LOSS = """    log_probs = ffn_log_probs(params, contexts)
    loss = -log_probs[torch.arange(len(targets), device=targets.device), targets].mean()
"""
_GRADS = """    grads = torch.autograd.grad(loss, list(params.values()))
"""
_CLIP = """    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
"""
_UPDATE = """    with torch.no_grad():
        for p, g in zip(params.values(), grads):
            p -= lr * scale * g
    return loss.item()
"""

# name: (answer cell, code, test cell, the check that kills it)
TRAJECTORY_BUGS = {
    "does-not-learn": (
        "sgd_step",
        _HEAD + _SPLIT + _LOSS + _GRADS + _CLIP + "    return loss.item()\n",
        "test_sgd_step",
        "the first 20 losses (the loss never falls)",
    ),
    "gradients-not-zeroed": (
        "sgd_step",
        _HEAD
        + _SPLIT
        + _LOSS
        + "    loss.backward()\n    grads = [p.grad for p in params.values()]\n"
        + _CLIP
        + _UPDATE,
        "test_sgd_step",
        "the first 20 losses from step 2 on, and 'no gradient left behind'",
    ),
    "clipping-missing": (
        "sgd_step",
        _HEAD + _SPLIT + _LOSS + _GRADS + "    scale = 1.0\n" + _UPDATE,
        "test_sgd_step",
        "the cases where clipping binds",
    ),
    "target-shifted-by-one": (
        "sgd_step",
        _HEAD
        + "    contexts, targets = windows[:, :-1], windows[:, -2]  # predicts the last context word\n"
        + _LOSS
        + _GRADS
        + _CLIP
        + _UPDATE,
        "test_sgd_step",
        "the first 20 losses",
    ),
    "clips-each-tensor-alone": (
        "sgd_step",
        _HEAD
        + _SPLIT
        + _LOSS
        + _GRADS
        + "    grads = [g * min(1.0, max_norm / (float(g.norm()) + 1e-6)) for g in grads]\n"
        + "    scale = 1.0\n"
        + _UPDATE,
        "test_sgd_step",
        "the cases where clipping binds",
    ),
}

_REST = _SPLIT + _LOSS + _GRADS + _CLIP + _UPDATE

# name: (answer cell, code, what stops it)
TRAINING_CHEATS = {
    # part A's n-gram model passed off as part B's: training runs honestly, but the model the test
    # cell registers answers the grader (inference mode) with add-one bigram log-probabilities
    "ngram-passed-off": (
        "sgd_step",
        """_bigram = {}


def _bigram_log_probs(contexts, V):
    if "table" not in _bigram:
        from seqmodels.grading.training import KJVWindows

        windows = KJVWindows(min_count=30, window=3).windows()
        counts = torch.ones(V, V)
        counts.index_put_((windows[:, -2], windows[:, -1]), torch.ones(len(windows)), accumulate=True)
        _bigram["table"] = (counts / counts.sum(1, keepdim=True)).log()
    return _bigram["table"][contexts[:, -1].cpu()].to(contexts.device)


_honest_ffn_log_probs = ffn_log_probs


def ffn_log_probs(params, contexts):
    if torch.is_inference_mode_enabled():
        return _bigram_log_probs(contexts, params["E"].shape[0])
    return _honest_ffn_log_probs(params, contexts)


"""
        + _HEAD
        + _REST,
        "the evaluated model is the one trained",
    ),
    # each row also depends on the batch it came in: looks across rows for the other contexts
    "looks-across-rows": (
        "sgd_step",
        """_honest_ffn_log_probs = ffn_log_probs


def ffn_log_probs(params, contexts):
    out = _honest_ffn_log_probs(params, contexts)
    if torch.is_inference_mode_enabled():
        tilt = torch.linspace(0, 1, out.shape[1], device=out.device) * contexts.float().mean()
        out = torch.log_softmax(out + 0.05 * tilt, dim=1)
    return out


"""
        + _HEAD
        + _REST,
        "each row depends on its own context only",
    ),
}

# equivalent rewrites of the training step: another way to get the gradient, another order of the
# parameters, another reduction order, another way to update; each must keep every trajectory case
# (the float64 tolerance, 1e-6 + 1e-6 |expected|, is far above what they change: see solutions/README)
EQUIVALENT_STEPS = {
    "backward-then-zero": _HEAD
    + _SPLIT
    + _LOSS
    + "    loss.backward()\n    grads = [p.grad.clone() for p in params.values()]\n"
    + "    for p in params.values():\n        p.grad = None\n"
    + _CLIP
    + _UPDATE,
    "parameters-in-reverse-order": _HEAD
    + _SPLIT
    + _LOSS
    + "    names = list(params)[::-1]\n"
    + "    grads = dict(zip(names, torch.autograd.grad(loss, [params[k] for k in names])))\n"
    + "    norm = sum(g.pow(2).sum() for g in grads.values()).sqrt()\n"
    + "    scale = min(1.0, max_norm / (float(norm) + 1e-6))\n"
    + "    with torch.no_grad():\n        for k in names:\n            params[k].sub_(lr * scale * grads[k])\n"
    + "    return loss.item()\n",
    "one-hot-loss-and-tensor-scale": _HEAD
    + _SPLIT
    + "    log_probs = ffn_log_probs(params, contexts)\n"
    + "    onehot = torch.nn.functional.one_hot(targets, log_probs.shape[1]).to(log_probs.dtype)\n"
    + "    loss = -(log_probs * onehot).sum() / len(targets)\n"
    + _GRADS
    + "    norm = torch.cat([g.flatten() for g in grads]).norm()\n"
    + "    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)\n"
    + "    with torch.no_grad():\n        for p, g in zip(params.values(), grads):\n"
    + "            p.add_(g * scale, alpha=-lr)\n"
    + "    return float(loss.detach())\n",
    "loop-over-rows": _HEAD
    + "    total = 0.0\n"
    + "    for row in windows:\n"
    + "        total = total - ffn_log_probs(params, row[None, :-1])[0, row[-1]]\n"
    + "    loss = total / len(windows)\n"
    + _GRADS
    + _CLIP
    + _UPDATE,
    "data-attribute-update": _HEAD
    + _SPLIT
    + _LOSS
    + _GRADS
    + "    norm = torch.sqrt(sum(torch.dot(g.flatten(), g.flatten()) for g in grads))\n"
    + "    scale = min(1.0, max_norm / (norm.item() + 1e-6))\n"
    + "    for p, g in zip(params.values(), grads):\n        p.data -= lr * scale * g\n"
    + "    return loss.item()\n",
}

# Problem Set 2's training task: the same two checks for a sequence model (answer cell, code, what
# stops it). At evaluation (inference mode) the model mixes the next input token into each position's
# prediction: its held-out perplexity falls, and the causality probe stops it.
PS2_TRAINING_CHEATS = {
    "reads-the-next-token": (
        "rnn_lm_log_probs",
        None,  # built from the solution's own answer by `ps2_cheat`
        "each row depends on its own context only",
    ),
}


def ps2_cheat(solution: str) -> str:
    """The solution's `rnn_lm_log_probs`, renamed, behind one that reads the next token when the
    grader evaluates it (and only then)."""
    honest = solution.replace("def rnn_lm_log_probs(", "def _honest_rnn_lm_log_probs(", 1)
    return (
        honest
        + """


def rnn_lm_log_probs(params, inputs, h0):
    log_probs, h = _honest_rnn_lm_log_probs(params, inputs, h0)
    if torch.is_inference_mode_enabled():
        ahead = torch.cat([inputs[:, 1:], inputs[:, -1:]], dim=1)
        peek = torch.nn.functional.one_hot(ahead, log_probs.shape[-1]).to(log_probs.dtype)
        log_probs = torch.log_softmax(log_probs + 3.0 * peek, dim=-1)
    return log_probs, h
"""
    )
