"""Tables of results for the chapters, rendered as Markdown so the site shows real tables."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from IPython.display import Markdown

from .glue import in_book_build

# a number in Python's e-notation, standing alone ("1.1e-13", "4e-07", "-2.5E+04")
_E_NUMBER = re.compile(r"(?<![\w.])([+-]?)(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_WHOLE = {"inf": "∞", "+inf": "∞", "-inf": "−∞", "nan": "—", "-nan": "—"}


def _power_of_ten(match: re.Match) -> str:
    sign, mantissa, exponent = match.group(1), match.group(2), int(match.group(3))
    if float(mantissa) == 0:
        return "0"
    minus = "−" if sign == "-" else ""
    if exponent == 0:
        return minus + mantissa
    return f"{minus}{mantissa} × 10{str(exponent).translate(_SUPERSCRIPT)}"


def for_people(text: str) -> str:
    """`text` with Python's number formats written for people: e-notation as a power of ten
    ("1.1e-13" → "1.1 × 10⁻¹³", "0.0e+00" → "0"), and a text that is only ``inf`` or ``nan`` as
    "∞" or "—". The book applies it to every glued number and table cell."""
    whole = _WHOLE.get(text.strip().lower())
    if whole is not None:
        return whole
    return _E_NUMBER.sub(_power_of_ten, text)


_NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight", 16: "sixteen"}


def threads_in_words(threads: int) -> str:
    """``"one CPU thread"``, ``"two CPU threads"``: how many threads a run used, said of the run
    (a "1-thread CPU" reads as if the machine had one thread)."""
    if threads < 1:
        raise ValueError(f"expected at least one thread, got {threads}")
    count = _NUMBER_WORDS.get(threads, f"{threads:,}")
    return f"{count} CPU thread{'' if threads == 1 else 's'}"


def machine_in_words(machine: str) -> str:
    """A stored result's ``machine`` (`where_measured`: ``"x86_64, 1 thread"``) for a sentence:
    ``"one CPU thread (x86-64)"``."""
    match = re.fullmatch(r"\s*([^,]+),\s*(\d+) threads?\s*", machine)
    if match is None:
        return machine
    architecture = match[1].replace("x86_64", "x86-64")
    return f"{threads_in_words(int(match[2]))} ({architecture})"


def _cell(value: object) -> str:
    text = for_people(str(value)).replace("|", r"\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    caption: str | None = None,
    name: str | None = None,
) -> Markdown:
    """A Markdown table from a header and rows of cells; cells are shown as ``str(cell)``, escaped.

    With a `caption`, the table is wrapped in a MyST ``{table}`` directive, so the book numbers it
    ("Table 1.2") and `name` is its label for ``{numref}``. Outside the book's build (a downloaded
    chapter in Jupyter, `seqmodels.glue.in_book_build`), the caption is a bold line above the table
    instead. Cells are written for people (`for_people`).
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
    caption = for_people(caption)
    if not in_book_build():  # a downloaded chapter: no MyST directive for Jupyter to show raw
        return Markdown("\n".join([f"**{caption}**", "", *lines]))
    directive = [f":::{{table}} {caption}"] + ([f":name: {name}"] if name else []) + [""]
    return Markdown("\n".join([*directive, *lines, ":::"]))
