"""Chapter 8's stored run: masked-LM pre-training of a small encoder on the KJV, then fine-tuning
it to tell a verse's book group, against the same model trained from scratch.

    .venv/bin/python benchmarks/ch08_finetuning.py                  # both stages, one thread
    .venv/bin/python benchmarks/ch08_finetuning.py --finetune-only  # reuse the stored encoder

Pre-training: ``seqmodels.finetuning.MaskedEncoder`` (d_model 64, 2 pre-LN layers, 4 heads,
d_ff 256, dropout 0.1, sinusoidal positions, masked-LM head tied to the embedding), Chapter 1's
vocabulary (``load_kjv(min_count=2)``) plus ``[MASK]``, on the KJV's *training* split only: STEPS
Adam steps at 3e-3 (linear warm-up over 100 steps, gradients clipped at 1) on batches of 64 verses
drawn without replacement (each epoch reshuffled and grouped by length in pools of eight batches),
each corrupted by ``seqmodels.pretraining.mask_tokens`` (BERT's 15 % / 80-10-10 rule), seed 0. Its
weights are stored in half precision as lib/seqmodels/results/ch08_finetuning.safetensors, and
fine-tuning starts from what the file holds. The masked-token accuracy is measured on the
validation split (one corruption, seed 1).

Fine-tuning: the task is a verse's book group (``seqmodels.finetuning.GROUPS``, six classes). For
each labelled-set size in SIZES and each seed in SEEDS, the labelled set is that many verses drawn
at random (seed) from the training split; a fixed sample of 500 validation-split verses (seed 99)
picks the epoch; the test set is every verse of the test split (whose chapters pre-training never
saw). Both models get the same recipe: ``finetune`` for 20 epochs, batches of 16, Adam at 1e-3,
clipped at 1, the weights of the best validation epoch kept; the classification head is initialised
from the same seed. "pre-trained" starts from the stored encoder, "scratch" from a fresh one. The
majority baseline predicts the labelled set's most frequent group. Writes
lib/seqmodels/results/ch08_finetuning.json.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from seqmodels.data import load_kjv
from seqmodels.device import set_deterministic
from seqmodels.finetuning import (
    ENCODER_CHECKPOINT,
    GROUPS,
    MaskedEncoder,
    accuracy,
    finetune,
    labelled_verses,
    mlm_batch,
    pretrain_mlm,
)
from seqmodels.pretraining import IGNORE
from seqmodels.results import save_result, where_measured

RESULTS = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results"
MODEL = dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=256, dropout=0.1)
STEPS, BATCH, LR = 1500, 64, 3e-3
SIZES, SEEDS = (100, 400), (0, 1, 2)
EPOCHS, FT_BATCH, FT_LR, N_VALIDATION = 20, 16, 1e-3, 500


def store(model: MaskedEncoder) -> dict[str, torch.Tensor]:
    """Write the encoder's weights in half precision; return what the file holds, as float32."""
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    save_file(state, RESULTS / f"{ENCODER_CHECKPOINT}.safetensors")
    return {k: v.float() for k, v in state.items()}


@torch.no_grad()
def masked_accuracy(model: MaskedEncoder, sentences, mask_id: int) -> float:
    """The share of selected validation tokens whose most likely word is the original."""
    model.eval()
    g, right, total = torch.Generator().manual_seed(1), 0, 0
    for i in range(0, len(sentences), 256):
        inputs, labels, key_mask = mlm_batch(sentences[i : i + 256], mask_id=mask_id, generator=g)
        selected = labels != IGNORE
        predicted = model.mlm_logits(inputs, key_mask)[..., :mask_id].argmax(-1)
        right += int((predicted[selected] == labels[selected]).sum())
        total += int(selected.sum())
    return right / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finetune-only", action="store_true")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_deterministic()
    start = time.perf_counter()
    corpus = load_kjv(min_count=2)
    V = len(corpus.vocab)
    path = RESULTS / f"{ENCODER_CHECKPOINT}.json"
    if args.finetune_only:
        result = json.loads(path.read_text())
        state = {
            k: v.float()
            for k, v in load_file(RESULTS / f"{ENCODER_CHECKPOINT}.safetensors").items()
        }
    else:
        torch.manual_seed(0)
        model = MaskedEncoder(V + 1, **MODEL)
        history = pretrain_mlm(
            model, corpus.train, mask_id=V, steps=args.steps, batch_size=BATCH, lr=LR,
            generator=torch.Generator().manual_seed(0), progress=True,
        )  # fmt: skip
        state = store(model)
        model.load_state_dict(state)
        tail = history.losses[-100:]
        result = {
            "model": model.config,
            "pretraining": {
                "steps": args.steps,
                "batch_size": BATCH,
                "lr": LR,
                "warmup": 100,
                "parameters": model.parameter_count(),
                "loss_first_100": round(sum(history.losses[:100]) / 100, 3),
                "loss_last_100": round(sum(tail) / len(tail), 3),
                "validation_masked_accuracy": round(
                    masked_accuracy(model, corpus.validation, V), 4
                ),
                "seconds": round(history.seconds, 1),
                "stored_dtype": "float16",
            },
        }
        print(json.dumps(result), flush=True)
    encode = corpus.vocab.encode
    data = {
        split: [(encode(tokens), group) for _, tokens, group in labelled_verses(split)]
        for split in ("train", "validation", "test")
    }
    pick = torch.randperm(len(data["validation"]), generator=torch.Generator().manual_seed(99))
    validation = [data["validation"][i] for i in pick[:N_VALIDATION]]
    test = data["test"]
    runs, ft_start = [], time.perf_counter()
    for size in SIZES:
        for seed in SEEDS:
            order = torch.randperm(
                len(data["train"]), generator=torch.Generator().manual_seed(seed)
            )
            train = [data["train"][i] for i in order[:size]]
            majority = Counter(y for _, y in train).most_common(1)[0][0]
            row = {
                "size": size,
                "seed": seed,
                "majority": sum(y == majority for _, y in test) / len(test),
            }
            for kind in ("pretrained", "scratch"):
                torch.manual_seed(seed)
                model = MaskedEncoder(V + 1, n_classes=len(GROUPS), **MODEL)
                if kind == "pretrained":
                    model.load_encoder(state)  # the head stays as initialised
                history = finetune(
                    model, train, validation, epochs=EPOCHS, batch_size=FT_BATCH, lr=FT_LR,
                    generator=torch.Generator().manual_seed(seed),
                )  # fmt: skip
                row[kind] = accuracy(model, test)
                row[f"{kind}_validation"] = max(history.validation)
                row[f"{kind}_best_epoch"] = history.validation.index(max(history.validation)) + 1
                row[f"{kind}_seconds"] = round(history.seconds, 1)
            print(json.dumps(row), flush=True)
            runs.append(row)
    result.update(
        {
            "task": "book group of a verse",
            "groups": list(GROUPS),
            "test_verses": len(test),
            "test_counts": [sum(y == k for _, y in test) for k in range(len(GROUPS))],
            "validation_verses": len(validation),
            "finetuning": dict(epochs=EPOCHS, batch_size=FT_BATCH, lr=FT_LR),
            "runs": runs,
            "finetuning_seconds": round(time.perf_counter() - ft_start, 1),
            "vocabulary_size": V,
        }
    )
    result.update(where_measured(torch.device("cpu")))
    result["seconds"] = round(time.perf_counter() - start, 1)
    result["seeds"] = list(SEEDS)
    result["script"] = "benchmarks/ch08_finetuning.py"
    result["command"] = ".venv/bin/python benchmarks/ch08_finetuning.py"
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    save_result(path.stem, result, path.parent)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
