"""Reference outputs: the solution notebook run through the same capture, stored beside it.

``solutions/<ps>/references/<notebook>.safetensors`` holds one tensor per captured value, keyed
``<task>::<case index>::<path>``; ``<notebook>.json`` is the manifest: torch version, device, the
SHA-256 of the solution notebook's cell sources and of the reference tensors file, and per task
its test cell, points, graded functions (and what they must not use, if the task says),
case names and each case's dtypes. `load` refuses
references whose tensors do not hash to the manifest's value. Neither file is ever copied into the
release (see nbgrader_config.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

if TYPE_CHECKING:
    import torch

SEP = "::"
# torch is imported by the functions that need tensors, not by this module: the grading driver
# checks the references (`verify`) without importing torch (over a second of its start)


def source_hash(notebook: nbformat.NotebookNode) -> str:
    """SHA-256 of the notebook's cell types and sources (outputs and metadata do not count)."""
    h = hashlib.sha256()
    for cell in notebook.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
    return h.hexdigest()


def training_spec(spec: dict, solution_sha256: str) -> dict:
    """A training task's specification as the manifest stores it: the test cell's, with the seed of
    its held-out sample where that set is drawn (`heldout.heldout_seed`), which no student has."""
    from . import heldout

    if heldout.HELDOUT[spec["heldout"]].seeded:
        return {**spec, "heldout_seed": heldout.heldout_seed(solution_sha256)}
    return dict(spec)


def _solution_client(*args, **kwargs):
    """nbclient's NotebookClient, timing each cell, and answering the grader's evaluation request
    after a training task's test cell the way `GuardedExecute` does at grading (nbclient is
    imported here: the grading driver imports this module only to `verify` references)."""
    from nbclient import NotebookClient

    class Client(NotebookClient):
        async def async_execute_cell(self, cell, cell_index, execution_count=None, **kw):
            started = time.monotonic()
            result = await super().async_execute_cell(cell, cell_index, execution_count, **kw)
            await self._answer_training(cell, cell_index)
            self.seconds[cell_index] = time.monotonic() - started
            return result

        async def _answer_training(self, cell, cell_index):
            from nbformat.v4 import new_code_cell

            from . import heldout
            from .records import capture_records

            for record in capture_records(cell.get("outputs", [])):
                if record["kind"] != "start" or "training" not in record:
                    continue
                spec = training_spec(record["training"], source_hash(self.nb))
                task_records = list(capture_records(cell.get("outputs", []), record["task"]))
                nonce, source = heldout.evaluation_request(record["task"], spec, task_records)
                request = new_code_cell(source)
                await super().async_execute_cell(request, cell_index, store_history=False)
                self.nb.cells[cell_index] = cell  # nbclient stores the cell it ran at the index
                self.answers[record["task"]] = (nonce, request.outputs)

    client = Client(*args, **kwargs)
    client.seconds, client.answers = {}, {}
    return client


def _training_reference(
    task: str, spec: dict, curve, answer: tuple[str, list], cell_records: list[dict] = ()
) -> dict:
    """The solution's own outcome of a training task: what its tiers are measured against
    (`cell_records`: its test cell's own records, where a capstone's tokenizer is)."""
    from . import heldout
    from .records import capture_records

    nonce, outputs = answer
    records = list(capture_records(outputs, task)) + list(cell_records)
    reference = heldout.measure(spec, curve, records, nonce)
    if isinstance(reference, str):
        raise RuntimeError(f"the solution's training task {task} failed: {reference}")
    reference["bar"] = heldout.reference_bar(spec, records)
    outcome = heldout.judge(spec, reference, curve, records, nonce, True)
    if outcome.points != sum(spec["tiers"]["points"].values()):
        raise RuntimeError(f"the solution does not earn every tier of {task}: {outcome.lines}")
    return reference


SUBMISSION_FILES = "submission"  # in references/: files a student submits beside the notebook


def _solution_folder(solution: Path) -> tuple[Path, dict[str, str]]:
    """Where the solution runs, and the SHA-256 of the files it reads there: its own folder, or,
    when ``references/submission/`` holds the files a student submits beside the notebook (Problem
    Set 6's checkpoint, trained before grading), a fresh folder with copies of them (they stay out of
    the student release with the rest of ``references/``)."""
    import shutil
    import tempfile

    given = solution.parent / "references" / SUBMISSION_FILES
    if not given.is_dir():
        return solution.parent, {}
    folder = Path(tempfile.mkdtemp(prefix=f"seqmodels-{solution.stem}-"))
    inputs = {}
    for path in sorted(given.iterdir()):
        shutil.copy(path, folder / path.name)
        inputs[path.name] = file_sha256(path)
    return folder, inputs


def build(
    solution: Path, device: str = "cpu", timeout: int = 600
) -> tuple[dict[str, torch.Tensor], dict]:
    """Execute the solution notebook on `device` and collect every task's captured cases.

    Stored references come from the CPU; other devices are for checking them (see tests). The
    kernel uses one thread (as a sandbox's one core does), and each cell is timed: grading gives a
    cell `time_factor` (three) times the solution's time (`GuardedExecute`). A training task's reference is the
    solution's own outcome on the grader's evaluation request (`seqmodels.grading.heldout`).
    """
    import torch

    from .compare import decode
    from .records import capture_records

    notebook = nbformat.read(solution, as_version=4)
    executed = copy.deepcopy(notebook)
    folder, inputs = _solution_folder(solution)
    client = _solution_client(
        executed,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute(
        env={
            **os.environ,
            "SEQMODELS_DEVICE": device,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
    )
    tensors: dict[str, torch.Tensor] = {}
    tasks: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    curves: dict[str, torch.Tensor] = {}
    cell_records: dict[str, list[dict]] = {}
    for index, cell in enumerate(executed.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id"):
            seconds[meta["grade_id"]] = round(client.seconds.get(index, 0.0), 2)
        for record in capture_records(cell.get("outputs", [])):
            task = record["task"]
            entry = tasks.setdefault(
                task,
                {
                    "cell": meta.get("grade_id"),
                    "points": meta.get("points"),
                    "cases": [],
                    "dtypes": [],
                    "functions": sorted(record.get("origins", {})),
                },
            )
            if record["kind"] == "start" and record.get("forbidden"):
                entry["forbidden"] = sorted(record["forbidden"])
            if record["kind"] == "start" and record.get("training"):
                entry["training"] = training_spec(record["training"], source_hash(notebook))
            if record["kind"] == "tokenizer":
                cell_records.setdefault(task, []).append(record)
            if record["kind"] == "curve":
                if "error" in record:
                    raise RuntimeError(f"the solution's loss curve of {task}: {record['error']}")
                curves[task] = decode(record["data"])["losses"]
            if record["kind"] != "case":
                continue
            if "error" in record:
                raise RuntimeError(
                    f"the solution failed case {record['case']!r} of {task}: {record['error']}"
                )
            if record["case"] in entry["cases"]:
                raise RuntimeError(f"case name {record['case']!r} is used twice in task {task}")
            index = len(entry["cases"])
            entry["cases"].append(record["case"])
            values = decode(record["data"])
            if record.get("check"):  # judged by a property of the captured values
                _check_property(task, record, values)
                entry.setdefault("checks", {})[record["case"]] = record["check"]
            entry["dtypes"].append(
                {path: str(v.dtype).removeprefix("torch.") for path, v in values.items()}
            )
            for path, value in values.items():
                tensors[f"{task}{SEP}{index}{SEP}{path}"] = value
    if not tasks:
        raise RuntimeError(f"{solution} captured no cases: do its test cells use Checker?")
    for task, entry in tasks.items():
        if "training" in entry:
            answer = client.answers.get(task, ("", []))
            entry["reference"] = _training_reference(
                task, entry["training"], curves.get(task), answer, cell_records.get(task, [])
            )
    manifest = {
        "notebook": solution.stem,
        "solution_sha256": source_hash(notebook),
        "torch": torch.__version__.split("+")[0],
        "device": device,
        "seconds": {"cells": seconds, "total": round(sum(client.seconds.values()), 2)},
        "tasks": tasks,
    }
    if inputs:
        manifest["submission_files"] = inputs
    return tensors, manifest


def _check_property(task: str, record: dict, values: dict) -> None:
    """The solution's own capture of a case judged by a property must have it."""
    from .properties import judge

    verdict = judge(record["case"], record, values, record["check"])
    if not verdict.passed:
        raise RuntimeError(
            f"the solution fails case {record['case']!r} of {task}: {verdict.message}"
        )


class ReferencesMismatch(RuntimeError):
    """The stored reference tensors are not the ones the manifest was written for."""


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(solution: Path) -> Path:
    """Build the references of `solution` and store them in ``references/`` beside it."""
    from safetensors.torch import save_file

    tensors, manifest = build(solution)
    out = solution.parent / "references"
    out.mkdir(exist_ok=True)
    save_file(dict(sorted(tensors.items())), out / f"{solution.stem}.safetensors")
    manifest["references_sha256"] = file_sha256(out / f"{solution.stem}.safetensors")
    (out / f"{solution.stem}.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    return out


def verify(directory: Path, notebook: str) -> dict:
    """The manifest stored for `notebook` in `directory`, once its tensors file is checked.

    Raises `ReferencesMismatch` if the tensors file does not hash to the manifest's SHA-256.
    """
    manifest = json.loads((directory / f"{notebook}.json").read_text())
    stored = directory / f"{notebook}.safetensors"
    expected, actual = manifest.get("references_sha256"), file_sha256(stored)
    if actual != expected:
        raise ReferencesMismatch(
            f"{stored} does not match its manifest {notebook}.json (SHA-256 {actual[:16]}…, "
            f"manifest says {str(expected)[:16]}…): the references were changed or replaced. "
            "Restore them from version control or run `make assignments` to rebuild them."
        )
    return manifest


def load(
    directory: Path, notebook: str
) -> tuple[dict[str, dict[str, dict[str, torch.Tensor]]], dict]:
    """``({task: {case: {path: tensor}}}, manifest)`` stored for `notebook` in `directory`
    (checked as `verify` checks it)."""
    from safetensors.torch import load_file

    manifest = verify(directory, notebook)
    flat = load_file(directory / f"{notebook}.safetensors")
    nested: dict[str, dict[str, dict[str, torch.Tensor]]] = {}
    for key, value in flat.items():
        task, index, path = key.split(SEP, 2)
        case = manifest["tasks"][task]["cases"][int(index)]
        nested.setdefault(task, {}).setdefault(case, {})[path] = value
    return nested, manifest


def main() -> None:
    """``python -m seqmodels.grading.references solutions/ps1/ps1.ipynb ...``"""
    import sys

    for path in sys.argv[1:]:
        print(f"references for {path} → {write(Path(path))}")


if __name__ == "__main__":
    main()
