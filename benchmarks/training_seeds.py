"""How a problem set's training task behaves across seeds: the rate at which the reference passes
each tier, the figure that sets the tiers' tolerances.

    .venv/bin/python benchmarks/training_seeds.py solutions/ps1/ps1.ipynb --seeds 20

The solution's answer cells are run in this process (they are the reference implementation); then
the training task's test cell is run once per seed with the data seed and the parameters' seed
changed (seed 0 is the stored reference's own run). ``--replace OLD NEW`` runs a variant of the
solution instead (each OLD text of its answer cells replaced by NEW: PS4's model without
attention, whose phoneme error rate sets the bar) and ``--label`` names its output file. Each run
is measured exactly as the grader measures a submission (`seqmodels.grading.heldout.measure_rows`
on the same evaluation request, whose calls may name `decode`) and judged against the stored
reference (`judge`'s gates and tiers). Writes ``solutions/<ps>/training_seeds.json``
(``training_seeds_<label>.json`` for a variant; instructors only: nbgrader's
`CourseDirectory.ignore` keeps it out of the release): per seed, the metric (and the perplexity
where there is one), the largest distance of the loss curve's stretch means from the reference's,
the last-batch gap, where the tiers ask for it the generalisation gap (held-out metric against the
last training batch's), the training cell's wall and CPU seconds, and which tiers passed.
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
from seqmodels.grading.training import Call, Training

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution_namespace(notebook: nbformat.NotebookNode, replace=()) -> dict:
    """Every code cell of the solution but the test cells and the analysis (plotting) cells, run
    in one namespace: the setup and the answers (each ``(old, new)`` of `replace` applied)."""
    namespace: dict = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or "plt." in cell.source:
            continue
        source = "\n".join(ln for ln in cell.source.splitlines() if ln.strip() not in MARKERS)
        for old, new in replace:
            source = source.replace(old, new)
        exec(compile(source, meta.get("grade_id", "cell"), "exec"), namespace)
    return namespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--replace", nargs=2, action="append", default=[], metavar=("OLD", "NEW"))
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if args.replace and not args.label:
        parser.error("a variant (--replace) needs a --label for its output file")
    source_text = "".join(c.source for c in nbformat.read(args.notebook, as_version=4).cells)
    for old, _ in args.replace:
        if old not in source_text:
            parser.error(f"--replace: {old!r} is not in the solution")
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

        def model(self, log_probs=None, device="cpu", **functions):
            captured["model"] = {"log_probs": log_probs, **functions}

        def done(self):
            pass

    runs = []
    for seed in range(args.seeds):
        namespace = solution_namespace(notebook, args.replace)
        source = re.sub(r"^from seqmodels\.grading\.training import .*$", "", test_cell, flags=re.M)
        source = re.sub(r"seed=0\)", f"seed={seed})", source, count=1)
        source = source.replace("make_generator(1)", f"make_generator({1 + seed})")
        namespace["Training"] = Captures
        data_class = heldout.data_from(spec["data"]).__class__
        namespace[data_class.__name__] = data_class
        data = dataclasses.replace(heldout.data_from(spec["data"]), seed=seed)
        started, cpu = time.perf_counter(), time.process_time()
        exec(compile(source, task["cell"], "exec"), namespace)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        seed_spec = {**spec, "data": {**spec["data"], "seed": seed}}
        ev = heldout.evaluation(seed_spec)
        rows = {}
        with torch.inference_mode():
            for call, c in ev.calls.items():
                c = c if isinstance(c, Call) else Call("log_probs", (c,))
                fn = captured["model"][c.function]
                parts = [
                    fn(*(a[i : i + 256] for a in c.args)) for i in range(0, len(c.args[0]), 256)
                ]
                rows[call] = torch.cat(parts)
                rows[call] = rows[call].float() if c.function == "log_probs" else rows[call]
        got = heldout.measure_rows(seed_spec, captured["curve"], rows)
        band = max(
            abs(a - b) for a, b in zip(got["curve_means"], reference["curve_means"], strict=True)
        )
        metric = heldout.HELDOUT[spec["heldout"]].metric
        value = got[metric.key]
        run = {
            "seed": seed,
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1),
            metric.key: round(value, 4),
            "band": round(band, 4),
            "last_gap": round(got["last_gap"], 4),
            "probe": got["probe"],
            **({"perplexity": round(got["perplexity"], 3)} if "perplexity" in got else {}),
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
    out = args.notebook.parent / f"training_seeds{'_' + args.label if args.label else ''}.json"
    out.write_text(
        json.dumps(
            {
                "task": name,
                "reference": reference,
                "tiers": spec["tiers"],
                **({"variant": [list(r) for r in args.replace]} if args.replace else {}),
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
