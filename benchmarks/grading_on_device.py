"""Grade PS1's and PS2's training tasks on this machine's device, in the full profile, and report.

The references and tolerances were made on the CPU. First the solution notebook runs on the device
without a sandbox, as `make assignments` runs it: each part-A case is judged against the stored CPU
references, and the training task's outcome (held-out perplexity, loss curve, last-batch gap) is
paid against the CPU reference's tiers. Then this grades the solution, the blank release and
three wrong submissions of each set (a model that does not learn and two more: cheats or a part-B
bug) with `make grade`'s driver, in the bubblewrap sandbox, and prints each submission's points
and the training task's feedback lines (the grader's measured held-out perplexity among them).

    python benchmarks/grading_on_device.py [--out folder] [--unsafe-no-sandbox]

Run it on a GPU machine and on the CPU and compare: the same submissions must earn the same points.
Kernels use CUDA when the sandbox can see it (``SEQMODELS_DEVICE`` overrides).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from grading_helpers import (  # noqa: E402
    BIN,
    LIMITS,
    feedback,
    new_course,
    read_csv,
    release_and_answers,
    run,
    submit,
)
from ps1_submissions import fill, solution_answers  # noqa: E402
from ps1_training_submissions import TRAINING_CHEATS, TRAJECTORY_BUGS, ps2_cheat  # noqa: E402
from ps2_submissions import WRONG as PS2_WRONG  # noqa: E402

TASKS = {"ps1": "ffn_training", "ps2": "rnn_training"}


def replacements(ps: str) -> dict[str, dict[str, str]]:
    """Three wrong submissions of `ps`, each as answer cell → code."""
    if ps == "ps1":
        cell, code, *_ = TRAJECTORY_BUGS["does-not-learn"]
        found = {"does-not-learn": {cell: code}}
        return found | {name: {c: code} for name, (c, code, _) in TRAINING_CHEATS.items()}
    answers = solution_answers(nbformat.read(ROOT / "solutions/ps2/ps2.ipynb", as_version=4))
    found = {}
    for name in ("tbptt_does_not_learn", "tbptt_gradients_not_zeroed"):
        cell, code, _ = PS2_WRONG[name]
        found[name] = {cell: code}
    found["reads-the-next-token"] = {"rnn_lm_log_probs": ps2_cheat(answers["rnn_lm_log_probs"])}
    return found


def training_lines(page: str, task: str) -> list[str]:
    """The training task's section of a feedback page, as lines of text."""
    if f"{task}: " not in page:
        return [f"(no section for {task} on the feedback page)"]
    section = page.split(f"{task}: ", 1)[1].split("</table>", 1)[0]
    section = re.sub(r"<style.*?</style>", "", section, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "\n", section))
    return [line.strip() for line in text.splitlines() if line.strip()]


def sandbox_sees_the_device() -> dict:
    """What a sandboxed kernel's Python sees of CUDA, with the sandbox's per-process limits and
    without them (CUDA reserves far more address space than ``RLIMIT_AS`` allows)."""
    import subprocess

    from seqmodels.grading.sandbox import Sandbox

    sandbox = Sandbox(memory_mb=int(LIMITS["SEQMODELS_MEMORY_LIMIT_MB"]))
    probe = (
        "import torch\nok = torch.cuda.is_available()\n"
        "print(ok, torch.cuda.get_device_name() if ok else '', "
        "float((torch.ones(4, device='cuda') * 2).sum()) if ok else '')"
    )
    found = {}
    with tempfile.TemporaryDirectory(prefix="seqmodels-probe-") as tmp:
        folder = Path(tmp)
        sandbox.prepare(folder, {})
        for name, limits in (("with rlimits", sandbox.rlimits), ("without rlimits", None)):
            with open(folder / "seccomp.bpf", "rb") as program:
                argv = sandbox.bwrap_argv(
                    folder, folder / "course", [sandbox.python(), "-c", probe], program.fileno()
                )
                result = subprocess.run(
                    argv,
                    capture_output=True,
                    text=True,
                    timeout=300,
                    pass_fds=[program.fileno()],
                    preexec_fn=limits,
                )
            found[name] = (result.returncode, result.stdout.strip(), result.stderr.strip()[-800:])
    return found


def references_on_device(ps: str, device: str) -> dict:
    """The solution run on `device` (no sandbox), judged against the stored CPU references."""
    from seqmodels.grading import heldout, references
    from seqmodels.grading.capture import _encode
    from seqmodels.grading.compare import judge

    folder = ROOT / "solutions" / ps
    start = time.monotonic()
    tensors, manifest = references.build(folder / f"{ps}.ipynb", device=device)
    refs, stored = references.load(folder / "references", ps)
    failed, cases = [], 0
    for task, entry in manifest["tasks"].items():
        for index, case in enumerate(entry["cases"]):
            prefix = f"{task}{references.SEP}{index}{references.SEP}"
            actual = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            verdict = judge(case, {"data": _encode(actual)}, refs[task][case])
            cases += 1
            if not verdict.passed:
                failed.append(f"{task} / {case}: {verdict.message}")
    training = {}
    for task, entry in manifest["tasks"].items():
        if "reference" in entry:
            cpu = stored["tasks"][task]["reference"]
            here = entry["reference"]
            outcome = heldout.pay(entry["training"], cpu, here, True)
            training[task] = {
                "perplexity": {"cpu": cpu["perplexity"], device: here["perplexity"]},
                "last_gap": {"cpu": cpu["last_gap"], device: here["last_gap"]},
                "final_curve_mean": {
                    "cpu": cpu["curve_means"][-1],
                    device: here["curve_means"][-1],
                },
                "points against the CPU reference": outcome.points,
                "lines": outcome.lines,
            }
    return {
        "seconds": round(time.monotonic() - start, 1),
        "cells": manifest["seconds"]["cells"],
        "cases": cases,
        "failed": failed,
        "training": training,
    }


def grade(ps: str, folder: Path, unsafe: bool) -> dict:
    course = new_course(folder / ps, ps)
    release, answers = release_and_answers(course, ps)
    files = {"solution": fill(release, answers), "blank": release}
    files |= {name: fill(release, {**answers, **cells}) for name, cells in replacements(ps).items()}
    submit(course, {k: nbformat.writes(v).encode() for k, v in files.items()}, ps)
    cmd = [str(BIN / "python"), "-m", "seqmodels.grading.run", ps, "--jobs", "2"]
    cmd += ["--unsafe-no-sandbox"] if unsafe else []
    start = time.monotonic()
    result = run(course, *cmd, env={**LIMITS, "SEQMODELS_GRADING_PROFILE": "full"}, check=False)
    seconds = time.monotonic() - start
    if result.returncode:
        print(result.stdout[-3000:], result.stderr[-6000:])
        return {"seconds": round(seconds, 1), "failed": result.stderr[-6000:], "students": {}}
    rows = read_csv(course, ps)
    report = {"seconds": round(seconds, 1), "log": result.stdout[-3000:], "students": {}}
    if "failed:" in result.stdout:
        log = (course / "grading" / "autograde.log").read_text(errors="replace")
        report["autograde.log"] = log[-6000:]
        print(log[-6000:])
    for student in files:
        if not (course / "grading" / "feedback" / student).exists():
            report["students"][student] = {"score": 0.0, TASKS[ps]: ["(not graded)"]}
            continue
        page = feedback(course, student, ps)
        report["students"][student] = {
            "score": float(rows[student]["score"]),
            "autograded": rows[student].get("autograded"),
            TASKS[ps]: training_lines(page, TASKS[ps]),
        }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    parser.add_argument("--unsafe-no-sandbox", action="store_true")
    parser.add_argument("--sets", nargs="+", default=list(TASKS))
    parser.add_argument("--skip-references", action="store_true", help="grade only")
    args = parser.parse_args()
    import torch

    report = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.unsafe_no_sandbox and not args.skip_references:
        report["sandbox"] = sandbox_sees_the_device()
        print("a sandboxed kernel sees:", json.dumps(report["sandbox"], indent=1))
    if not args.skip_references:
        for ps in args.sets:
            try:
                found = references_on_device(ps, device)
            except Exception as error:  # reported, and grading still runs
                found = {"cases": 0, "failed": [f"{type(error).__name__}: {error}"], "training": {}}
            report[f"{ps} references"] = found
            print(f"{ps} on {device}: {found['cases']} cases, {len(found['failed'])} failed")
            print("\n".join(f"  FAILED {line}" for line in found["failed"]))
            print(json.dumps(found["training"], indent=1))
    with tempfile.TemporaryDirectory(prefix="grading-on-device-") as tmp:
        for ps in args.sets:
            report[ps] = grade(ps, Path(tmp), args.unsafe_no_sandbox)
            print(f"{ps}: graded {len(report[ps]['students'])} in {report[ps]['seconds']} s")
            for student, row in report[ps]["students"].items():
                print(f"  {student:28} {row['score']:5.1f}  " + " | ".join(row[TASKS[ps]][:12]))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
