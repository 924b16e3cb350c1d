"""Grading machinery for the course's nbgrader problem sets (the models never import it).

- `capture`: what test cells call inside the student's kernel: it *records* outputs, decides nothing.
- `compare`: the verdict, computed in the grader's own process from captures and stored references.
- `preprocessors`: nbgrader preprocessors that plug the above into ``nbgrader autograde``.
- `references`: running the solution notebook through the same capture to store reference outputs.
- `run`: ``make grade``: every submission graded in parallel, then feedback and a grades CSV.
"""

import sys

# jsonschema checks the "iri" string format with rfc3987-syntax when that is installed (jupyter-events
# pulls it in), and importing it builds a grammar: 0.9 s of CPU in every process that imports
# nbformat (the grading driver, each worker). No notebook or gradebook schema uses the format.
sys.modules.setdefault("rfc3987_syntax", None)

__all__ = ["Checker"]


def __getattr__(name: str):
    """``from seqmodels.grading import Checker`` (test cells) imports `capture`, and torch with it,
    on first use: the grading driver imports this package without needing torch."""
    if name == "Checker":
        from .capture import Checker

        return Checker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
