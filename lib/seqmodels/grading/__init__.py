"""Grading machinery for the course's nbgrader problem sets (the models never import it).

- `capture`: what test cells call inside the student's kernel: it *records* outputs, decides nothing.
- `compare`: the verdict, computed in the grader's own process from captures and stored references.
- `preprocessors`: nbgrader preprocessors that plug the above into ``nbgrader autograde``.
- `references`: running the solution notebook through the same capture to store reference outputs.
- `run`: ``make grade``: every submission graded in parallel, then feedback and a grades CSV.
"""

from .capture import Checker

__all__ = ["Checker"]
