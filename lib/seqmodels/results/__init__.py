"""Results of runs too long to repeat at every build, stored as JSON inside the package.

Each file is written by a script in ``benchmarks/`` (named in the file's ``"script"`` entry) and read
with `importlib.resources`, so a chapter finds it wherever its notebook is opened.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

#: the prefix of the instructor's edition's stored runs (``benchmarks/solutions_chNN.py``): they are
#: kept in the instructor's repository, ``book/instructor/results/``, never in this package, so the
#: student release (which ships this package's data) holds no worked solution's numbers
INSTRUCTOR_PREFIX = "solutions_"


def instructor_results() -> Path:
    """The folder of the worked solutions' stored runs, in the instructor's repository."""
    folder = Path(__file__).resolve().parents[3] / "book" / "instructor" / "results"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} does not exist: the worked solutions' runs are in the instructor's "
            "repository only"
        )
    return folder


def available() -> list[str]:
    """The names of the stored results (file names without ``.json``)."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def load_result(name: str) -> dict[str, Any]:
    """The stored result `name` (e.g. ``"ffn_long_run"``) as a dict; a worked solution's
    (``solutions_ch04``) from the instructor's repository."""
    if name.startswith(INSTRUCTOR_PREFIX):
        return json.loads((instructor_results() / f"{name}.json").read_text(encoding="utf-8"))
    path = resources.files(__name__) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no stored result named {name!r}; expected one of {available()} in seqmodels.results"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def where_measured(device: Any) -> dict[str, str]:
    """What a stored result records about where it ran: device, machine and threads, torch, date."""
    import platform
    from datetime import date

    import torch

    name = str(device) if device.type != "cuda" else torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return {
        "device": name,
        "machine": f"{platform.machine()}, {threads} thread{'' if threads == 1 else 's'}",
        "torch": torch.__version__,
        "date": date.today().isoformat(),
    }


def save_result(name: str, result: dict[str, Any], folder: Any = None) -> str:
    """Write `result` as ``<name>.json`` into this package (or `folder`; a worked solution's into
    the instructor's repository); return the path written."""
    if folder is None and name.startswith(INSTRUCTOR_PREFIX):
        folder = Path(__file__).resolve().parents[3] / "book" / "instructor" / "results"
    target = Path(folder) if folder is not None else Path(__file__).parent
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return str(path)
