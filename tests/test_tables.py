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
