import sys

import pytest

from seqmodels.tables import markdown_table


def test_markdown_table_escapes_pipes_and_angle_brackets():
    table = markdown_table(["token", "p"], [["</s>", 0.5], ["a|b", 1]])
    assert table.data.splitlines() == [
        "| token | p |",
        "|---|---|",
        "| &lt;/s&gt; | 0.5 |",
        r"| a\|b | 1 |",
    ]


def test_markdown_table_refuses_ragged_rows():
    with pytest.raises(ValueError, match="row 1 has 1 cells, expected 2"):
        markdown_table(["a", "b"], [[1, 2], [3]])


def test_without_myst_nb_the_caption_is_a_bold_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import fails, as in plain Jupyter
    table = markdown_table(["n"], [[1]], caption="Held-out perplexity.", name="tbl-x")
    assert table.data.splitlines() == ["**Held-out perplexity.**", "", "| n |", "|---|", "| 1 |"]


def test_a_captioned_table_is_a_numbered_myst_table_with_its_label():
    pytest.importorskip("myst_nb")
    table = markdown_table(["n", "p"], [[1, 0.5]], caption="Held-out perplexity.", name="tbl-x")
    assert table.data.splitlines() == [
        ":::{table} Held-out perplexity.",
        ":name: tbl-x",
        "",
        "| n | p |",
        "|---|---|",
        "| 1 | 0.5 |",
        ":::",
    ]
    with pytest.raises(ValueError, match="needs a caption"):
        markdown_table(["n"], [[1]], name="tbl-y")
    with pytest.raises(ValueError, match="one-line caption"):
        markdown_table(["n"], [[1]], caption="two\nlines")
