"""``glue``: hand a value computed in a chapter to its prose, with or without myst-nb.

The book's build runs the chapters with myst-nb, whose ``glue`` records a value for the text's
``{glue:text}`` roles. A chapter downloaded as a notebook runs in plain Jupyter, where myst-nb is
usually not installed: there ``glue`` shows the value (``display=True``) or does nothing.
"""

from __future__ import annotations

from typing import Any


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

    In the book's build a false claim raises `ClaimFailed`, so the chapter fails to execute and the
    build fails; a true one is recorded (glue key ``claim-<name>``) for the build's claims report.
    In a downloaded notebook, where numbers may differ (another device, other threads), a false claim
    is only a warning that the page's sentence does not hold on this run.
    """
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"expected a claim name of letters, digits, '-' and '_', got {name!r}")
    try:
        holds = bool(holds)
    except (TypeError, RuntimeError, ValueError) as error:  # a tensor of many values, say
        raise TypeError(
            f"claim {name!r}: expected a truth value, got {type(holds).__name__}"
        ) from error
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        if not holds:
            import warnings

            warnings.warn(
                f"on this run the page's sentence does not hold: {sentence}", stacklevel=2
            )
        return
    if not holds:
        raise ClaimFailed(f"claim {name!r} is false on this run: {sentence}")
    glue(f"claim-{name}", sentence, display=False)
