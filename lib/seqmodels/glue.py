"""``glue``: hand a value computed in a chapter to its prose, with or without myst-nb.

The book's build runs the chapters with myst-nb, whose ``glue`` records a value for the text's
``{glue:text}`` roles. A chapter downloaded as a notebook runs in plain Jupyter, where myst-nb is
usually not installed: there ``glue`` shows the value (``display=True``) or does nothing.
"""

from __future__ import annotations

import os
from typing import Any

#: set to "1" by the book's build (book/_ext/notebooks.py, before any chapter's kernel starts, so
#: every kernel it starts inherits it): claims are enforced there, and only there
BUILD_FLAG = "SEQMODELS_BOOK_BUILD"


def in_book_build() -> bool:
    """Whether this code runs in the book's build (its environment has `BUILD_FLAG` = "1"), not in
    a student's Jupyter or a test — whether or not myst-nb is installed there."""
    return os.environ.get(BUILD_FLAG) == "1"


def glue(name: str, value: Any, display: bool = True) -> None:
    """Record `value` under `name` for the book (myst-nb), else show it if `display`."""
    try:
        from myst_nb import glue as myst_nb_glue
    except ImportError:
        if display:
            from IPython.display import display as show

            show(value)
        return
    myst_nb_glue(name, value, display=display)


class ClaimFailed(AssertionError):
    """A sentence of the page no longer agrees with the numbers its chapter computed."""


def claim(name: str, holds: object, sentence: str) -> None:
    """Assert that `sentence`, a statement of the page about computed values, `holds` on this run.

    In the book's build (`in_book_build`) a false claim raises `ClaimFailed`, so the chapter fails to
    execute and the build fails; a true one is recorded (glue key ``claim-<name>``) for the build's
    claims report. Anywhere else — a downloaded notebook run with "Restart Kernel and Run All" in
    the course's own environment, where numbers may differ (another device, a busy machine) — a
    false claim is only a warning that the page's sentence does not hold on this run, and nothing
    after it is stopped.
    """
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"expected a claim name of letters, digits, '-' and '_', got {name!r}")
    try:
        holds = bool(holds)
    except (TypeError, RuntimeError, ValueError) as error:  # a tensor of many values, say
        raise TypeError(
            f"claim {name!r}: expected a truth value, got {type(holds).__name__}"
        ) from error
    if not in_book_build():
        if not holds:
            import warnings

            warnings.warn(
                f"on this run the page's sentence does not hold: {sentence}", stacklevel=2
            )
        return
    if not holds:
        raise ClaimFailed(f"claim {name!r} is false on this run: {sentence}")
    glue(f"claim-{name}", sentence, display=False)
