"""Tables of results for the chapters, rendered as Markdown so the site shows real tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from IPython.display import Markdown


def _cell(value: object) -> str:
    text = str(value).replace("|", r"\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    caption: str | None = None,
    name: str | None = None,
) -> Markdown:
    """A Markdown table from a header and rows of cells; cells are shown as ``str(cell)``, escaped.

    With a `caption`, the table is wrapped in a MyST ``{table}`` directive, so the book numbers it
    ("Table 1.2") and `name` is its label for ``{numref}``. Where myst-nb is not installed (a
    downloaded chapter in plain Jupyter), the caption is a bold line above the table instead.
    """
    rows = [list(row) for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"row {i} has {len(row)} cells, expected {len(header)} (one per column)"
            )
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
    if caption is None:
        if name is not None:
            raise ValueError("a table needs a caption to carry a name (label)")
        return Markdown("\n".join(lines))
    if "\n" in caption:
        raise ValueError("expected a one-line caption")
    try:
        import myst_nb  # noqa: F401  (the book's build: a numbered, labelled table)
    except ImportError:
        return Markdown("\n".join([f"**{caption}**", "", *lines]))
    directive = [f":::{{table}} {caption}"] + ([f":name: {name}"] if name else []) + [""]
    return Markdown("\n".join([*directive, *lines, ":::"]))
