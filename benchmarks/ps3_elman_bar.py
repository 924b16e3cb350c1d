"""PS3's bar across seeds: what the part-D Elman RNN of about the CIFG's size reaches on the agreement
language at the training task's distance, with the training task's budget, over 20 seeds.

    .venv/bin/python benchmarks/ps3_elman_bar.py --seeds 20

PS3's bar (0.75 agreement accuracy at the verb) is "an accuracy the Elman RNN of about the same size
does not reach". The solution's part D trains one such Elman RNN (56 hidden units, 6,059 parameters
against the CIFG's 6,091); this script trains it with every seed 0 … N-1 (data seed s, parameters
from generator seed 1 + s, as `training_seeds.py` changes the CIFG's) on the training task's data
specification read from the manifest (`AgreementSentences`: d, 20,000 sentences, batches of 64,
2,000 steps), with the training task's Adam (lr 0.03, β 0.9/0.999, bias correction) after global-norm
clipping at 1.0, and measures the accuracy exactly as the grader measures a submission's
(`heldout.AGREEMENT` on the grader's 2,000 drawn sentences, `heldout_set`). Writes
``solutions/ps3/bar_seeds.json`` (instructors only: nbgrader's `CourseDirectory.ignore` keeps it out
of the release). One thread, as the grading sandbox has one core.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from seqmodels.grading import heldout, references
from seqmodels.seeding import make_generator

ROOT = Path(__file__).resolve().parents[1]
H, M, LR, MAX_NORM = 56, 16, 0.03, 1.0


def init(V: int, seed: int) -> dict[str, torch.Tensor]:
    g = make_generator(seed)

    def u(*shape):
        return (torch.rand(*shape, generator=g) * 2 - 1) / math.sqrt(H)

    p = {"E": torch.randn(V, M, generator=g), "W": u(H, M), "U": u(H, H), "b": u(H)}
    p |= {"W_y": u(V, H), "b_y": u(V)}
    return {n: t.requires_grad_() for n, t in p.items()}


def log_probs(p: dict[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
    x = p["E"][inputs]
    h, states = torch.zeros(len(x), H), []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ p["W"].T + h @ p["U"].T + p["b"])
        states.append(h)
    return torch.log_softmax(torch.stack(states, dim=1) @ p["W_y"].T + p["b_y"], dim=-1)


def train(data, seed: int) -> dict[str, torch.Tensor]:
    p = init(len(data.vocabulary()), 1 + seed)
    m = {n: torch.zeros_like(t) for n, t in p.items()}
    v = {n: torch.zeros_like(t) for n, t in p.items()}
    for t, batch in enumerate(data.batches(), start=1):
        loss = -log_probs(p, batch[:, :-1]).gather(-1, batch[:, 1:, None]).mean()
        grads = torch.autograd.grad(loss, list(p.values()))
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        scale = min(1.0, MAX_NORM / (norm + 1e-6))
        with torch.no_grad():
            for (n, q), g in zip(p.items(), grads, strict=True):
                m[n] = 0.9 * m[n] + 0.1 * scale * g
                v[n] = 0.999 * v[n] + 0.001 * (scale * g) ** 2
                q -= LR * (m[n] / (1 - 0.9**t)) / ((v[n] / (1 - 0.999**t)).sqrt() + 1e-8)
    return p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    source = ROOT / "solutions" / "ps3" / "ps3.ipynb"
    manifest = references.verify(source.parent / "references", "ps3")
    spec = next(t["training"] for t in manifest["tasks"].values() if "training" in t)
    contexts, targets = heldout.heldout_set(spec)
    bar = float(spec["tiers"]["bar_value"])
    runs = []
    for seed in range(args.seeds):
        data = heldout.data_from({**spec["data"], "seed": seed})
        started = time.perf_counter()
        p = train(data, seed)
        seconds = time.perf_counter() - started
        with torch.inference_mode():
            rows = log_probs(p, contexts).double()
        accuracy = heldout.AGREEMENT.measure(rows, targets, data)
        run = {"seed": seed, "accuracy": round(accuracy, 4), "seconds": round(seconds, 1)}
        run["reaches_bar"] = heldout.AGREEMENT.beats(accuracy, bar)
        runs.append(run)
        print(json.dumps(run), flush=True)
    parameters = sum(t.numel() for t in init(len(data.vocabulary()), 1).values())
    out = source.parent / "bar_seeds.json"
    result = {
        "script": "benchmarks/ps3_elman_bar.py",
        "model": f"Elman RNN, m {M}, H {H}, {parameters} parameters",
        "data": spec["data"],
        "bar": bar,
        "runs": runs,
        "reach_bar": sum(r["reaches_bar"] for r in runs),
        "largest_accuracy": max(r["accuracy"] for r in runs),
        "torch": torch.__version__,
        "machine": "one thread",
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {result['reach_bar']} of {len(runs)} reach {bar}")


if __name__ == "__main__":
    main()
