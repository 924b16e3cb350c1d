"""Chapter 8's stored KJV runs of the Transformer LM and the checkpoint that Chapter 9 decodes.

    .venv/bin/python benchmarks/ch08_gpt_kjv.py            # both runs (about 15 min on one thread)
    .venv/bin/python benchmarks/ch08_gpt_kjv.py --only small

``small``: the page's model (d_model 64, 2 layers, 4 heads, d_ff 256, tied embeddings) with the
settings of Chapter 5's stored RNN/GRU/LSTM runs: 150 steps of 32 verses, Adam at 3e-3, gradients
clipped at 1, seed 0, so that its row compares like with like.

``long``: the same model trained for the budget of Chapter 3's RNN long run: 1,170 steps of 64
verses (3 epochs), Adam at 3e-3. (A wider, deeper model costs about 2 s a step here, 40 min for this
budget: a run for a GPU, with ``--d-model``, ``--layers`` and ``--steps``.) Its weights are stored in
half precision as lib/seqmodels/results/gpt_kjv.safetensors (``seqmodels.transformer.
pretrained_kjv_lm()`` loads them); the test perplexity recorded is that of the stored weights.

Chapter 1's vocabulary and splits; test perplexity over the n-gram models' tokens (each verse read
from ``<s>``, its words and ``</s>`` predicted). Writes lib/seqmodels/results/gpt_kjv.json.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from seqmodels.data import load_kjv
from seqmodels.device import get_device, set_deterministic
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.transformer import KJV_CHECKPOINT, TransformerLM

RESULTS = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results"
COMMON = dict(n_heads=4, max_len=256, positions="sinusoidal", norm_first=True, tie_weights=True)
RUNS = {
    "small": dict(model=dict(d_model=64, n_layers=2, d_ff=256), steps=150, batch_size=32),
    "long": dict(model=dict(d_model=64, n_layers=2, d_ff=256), steps=1170, batch_size=64),
}
LR = 3e-3


def run(name: str, corpus, device) -> tuple[dict, TransformerLM]:
    spec = RUNS[name]
    seed_everything(0)
    model = TransformerLM(len(corpus.vocab), **spec["model"], **COMMON).to(device)
    history = train_sentence_lm(
        model, corpus.train, corpus.validation[::5], steps=spec["steps"],
        batch_size=spec["batch_size"], lr=LR, generator=seed_everything(0),
        eval_every=max(spec["steps"] // 6, 1), progress=True,
    )  # fmt: skip
    total, n = sentence_nll(model, corpus.test)
    result = {
        "model": model.config,
        "steps": spec["steps"],
        "batch_size": spec["batch_size"],
        "lr": LR,
        "parameters": model.parameter_count(),
        "test_perplexity": round(math.exp(total / n), 2),
        "validation_perplexity": [round(math.exp(x), 2) for x in history.eval_loss],
        "validation_steps": history.eval_steps,
        "seconds": round(history.seconds, 1),
        "tokens_seen": history.tokens_seen,
        "test_tokens": n,
    }
    print(name, json.dumps(result), flush=True)
    return result, model


def store_checkpoint(model: TransformerLM, corpus, result: dict) -> None:
    """Half-precision weights (the tied output matrix once); the stored model's test perplexity."""
    state = {
        k: v.detach().to("cpu", torch.float16).contiguous()
        for k, v in model.state_dict().items()
        if k != "output.weight"
    }
    save_file(state, RESULTS / f"{KJV_CHECKPOINT}.safetensors")
    with torch.no_grad():
        for value in model.state_dict().values():
            value.copy_(value.to(torch.float16).to(value.dtype))  # what the file holds
    total, n = sentence_nll(model, corpus.test)
    result["stored_test_perplexity"] = round(math.exp(total / n), 2)
    result["stored_dtype"] = "float16"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(RUNS), default=None)
    parser.add_argument("--d-model", type=int, default=64, help="the long run's width")
    parser.add_argument("--layers", type=int, default=2, help="the long run's depth")
    parser.add_argument("--steps", type=int, default=1170, help="the long run's steps")
    args = parser.parse_args()
    RUNS["long"]["model"] = dict(d_model=args.d_model, n_layers=args.layers, d_ff=4 * args.d_model)
    RUNS["long"]["steps"] = args.steps
    torch.set_num_threads(1)
    set_deterministic()
    device = get_device()
    corpus = load_kjv(min_count=2)
    path = RESULTS / f"{KJV_CHECKPOINT}.json"
    result = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    for name in [args.only] if args.only else list(RUNS):
        result["runs"][name], model = run(name, corpus, device)
        if name == "long":
            store_checkpoint(model, corpus, result["runs"][name])
            result["model"] = model.config
    result["vocabulary_size"] = len(corpus.vocab)
    result.update(where_measured(device))
    result["script"] = "benchmarks/ch08_gpt_kjv.py"
    result["command"] = ".venv/bin/python benchmarks/ch08_gpt_kjv.py"
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    save_result(path.stem, result, path.parent)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
