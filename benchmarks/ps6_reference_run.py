"""Problem Set 6's reference checkpoint: the solution's own training run (Task 5), as a student runs it.

    .venv/bin/python benchmarks/ps6_reference_run.py [--steps 2400] [--out DIR]

Runs the solution notebook's setup and answer cells in this process (they are the reference
implementation) and calls its `train_capstone` in a fresh folder, so the checkpoint and the log are
exactly what the solution writes. By default both land in ``solutions/ps6/references/submission/``,
where `make assignments` (`seqmodels.grading.references`) finds the files the solution submits
beside its notebook; ``references/`` never reaches the student release. ``--steps`` overrides the
run's steps (a longer run measures how far the budget's reference is from what more time reaches:
the ``ceiling`` of the tiers). The run prints its tokenizer time, its validation bits per byte every
300 steps and its total time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=None, help="the run's steps (default: the solution's)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "solutions/ps6/references/submission")
    args = parser.parse_args()
    notebook = nbformat.read(ROOT / "solutions/ps6/ps6.ipynb", as_version=4)
    namespace: dict = {}
    work = Path(tempfile.mkdtemp(prefix="ps6-run-"))
    os.chdir(work)
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if (
            cell.cell_type != "code"
            or meta.get("grade")
            or meta.get("grade_id")
            in (
                "capstone_train_cell",
                "d_experiment",
            )
        ):
            continue
        source = cell.source
        if args.steps is not None and meta.get("grade_id") == "capstone_run":
            source = source.replace("steps=2400", f"steps={args.steps}")
        exec(compile(source, meta.get("grade_id", "cell"), "exec"), namespace)
    namespace["train_capstone"](namespace["CHECKPOINT"], namespace["LOG"])
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("capstone.safetensors", "capstone_log.json"):
        shutil.copy(work / name, args.out / name)
    log = json.loads((work / "capstone_log.json").read_text())
    print(json.dumps({"validation": log["validation"], "seconds": log["seconds"]}, indent=1))
    print(
        f"held-out (the grader's WEB text): {heldout_bits_per_byte(namespace, work):.4f} bits per byte"
    )


def heldout_bits_per_byte(namespace: dict, folder: Path) -> float:
    """The checkpoint's bits per byte on the grader's held-out stretches, measured here as the
    grader measures a submission (`seqmodels.grading.heldout.capstone_measure`, the solution's
    test cell's task)."""
    import torch

    from seqmodels.grading import heldout

    params, merges, n_heads = namespace["load_capstone"](folder / "capstone.safetensors")
    spec = {"data": {"kind": "CapstoneText"}, "heldout": "web_test_bytes"}
    calls = heldout.capstone_evaluation(spec, tuple(merges)).calls
    with torch.inference_mode():
        rows = {c: namespace["gpt_log_probs"](params, x, n_heads) for c, x in calls.items()}
    return heldout.capstone_measure(spec, tuple(merges), rows)["bits_per_byte"]


if __name__ == "__main__":
    main()
