"""How a problem set's training task behaves across seeds: the rate at which the reference passes
each tier, the figure that sets the tiers' tolerances.

    .venv/bin/python benchmarks/training_seeds.py solutions/ps1/ps1.ipynb --seeds 20

The solution's answer cells are run in this process (they are the reference implementation); then
the training task's test cell is run once per seed with the data seed and the parameters' seed
changed (seed 0 is the stored reference's own run). Each run is measured exactly as the grader
measures a submission (`seqmodels.grading.heldout.measure_rows` on the same evaluation request) and
judged against the stored reference (`judge`'s gates and tiers). Writes
``solutions/<ps>/training_seeds.json`` (instructors only: nbgrader's `CourseDirectory.ignore` keeps it
out of the release): per seed, the perplexity, the largest distance of the
loss curve's stretch means from the reference's, the last-batch gap, where the tiers ask for it the
generalisation gap (held-out metric against the last training batch's), and which tiers passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from pathlib import Path

import nbformat
import torch

from seqmodels.grading import heldout, references
from seqmodels.grading.training import Training

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution_namespace(notebook: nbformat.NotebookNode) -> dict:
    """Every code cell of the solution but the test cells and the analysis (plotting) cells, run
    in one namespace: the setup and the answers."""
    namespace: dict = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or "plt." in cell.source:
            continue
        source = "\n".join(ln for ln in cell.source.splitlines() if ln.strip() not in MARKERS)
        exec(compile(source, meta.get("grade_id", "cell"), "exec"), namespace)
    return namespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    notebook = nbformat.read(args.notebook, as_version=4)
    manifest = references.verify(args.notebook.parent / "references", args.notebook.stem)
    name, task = next((n, t) for n, t in manifest["tasks"].items() if "training" in t)
    spec, reference = task["training"], task["reference"]
    test_cell = next(
        c.source
        for c in notebook.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == task["cell"]
    )
    captured: dict = {}

    class Captures(Training):
        """The test cell's `Training`, keeping its curve and model here instead of emitting them."""

        def __init__(self, task, data, **kwargs):
            self.task, self.data = task, data

        def curve(self, losses):
            captured["curve"] = torch.tensor([float(x) for x in losses], dtype=torch.float64)

        def model(self, log_probs, device="cpu"):
            captured["model"] = log_probs

        def done(self):
            pass

    runs = []
    for seed in range(args.seeds):
        namespace = solution_namespace(notebook)
        source = re.sub(r"^from seqmodels\.grading\.training import .*$", "", test_cell, flags=re.M)
        source = re.sub(r"seed=0\)", f"seed={seed})", source, count=1)
        source = source.replace("make_generator(1)", f"make_generator({1 + seed})")
        namespace["Training"] = Captures
        data_class = heldout.data_from(spec["data"]).__class__
        namespace[data_class.__name__] = data_class
        data = dataclasses.replace(heldout.data_from(spec["data"]), seed=seed)
        started = time.perf_counter()
        exec(compile(source, task["cell"], "exec"), namespace)
        seconds = time.perf_counter() - started
        seed_spec = {**spec, "data": {**spec["data"], "seed": seed}}
        ev = heldout.evaluation(seed_spec)
        with torch.inference_mode():
            rows = {
                call: torch.cat([captured["model"](c[i : i + 256]) for i in range(0, len(c), 256)])
                for call, c in ev.calls.items()
            }
        got = heldout.measure_rows(
            seed_spec, captured["curve"], {k: v.float() for k, v in rows.items()}
        )
        band = max(
            abs(a - b) for a, b in zip(got["curve_means"], reference["curve_means"], strict=True)
        )
        metric = heldout.HELDOUT[spec["heldout"]].metric
        value = got[metric.key]
        run = {
            "seed": seed,
            "seconds": round(seconds, 1),
            "perplexity": round(got["perplexity"], 3),
            metric.key: round(value, 4),
            "band": round(band, 4),
            "last_gap": round(got["last_gap"], 4),
            "probe": got["probe"],
            "within": metric.within(value, reference[metric.key], spec["tiers"]["within"]),
            "bar": metric.beats(value, reference["bar"]),
            "band_ok": band <= spec["tiers"]["band"],
            "consistent": abs(got["last_gap"] - reference["last_gap"])
            <= spec["tiers"]["consistency"],
        }
        if "generalisation" in spec["tiers"]:  # the gate `judge` adds: no better held out
            gap = value - got[f"last_{metric.key}"]
            run["generalisation_gap"] = round(gap if metric.higher_is_better else -gap, 4)
            run["generalises"] = run["generalisation_gap"] <= spec["tiers"]["generalisation"]
        assert data.seed == seed
        runs.append(run)
        print(json.dumps(run), flush=True)
    rates = {
        k: sum(r[k] for r in runs) / len(runs)
        for k in ("within", "bar", "band_ok", "consistent", "generalises")
        if k in runs[0]
    }
    out = args.notebook.parent / "training_seeds.json"
    out.write_text(
        json.dumps(
            {
                "task": name,
                "reference": reference,
                "tiers": spec["tiers"],
                "rates": rates,
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    print("pass rates:", rates, "→", out)


if __name__ == "__main__":
    main()
