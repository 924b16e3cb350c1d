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
