import pytest

from seqmodels.glue import BUILD_FLAG
from seqmodels.tables import for_people, machine_in_words, markdown_table, threads_in_words


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


def test_outside_the_books_build_the_caption_is_a_bold_line(monkeypatch):
    monkeypatch.delenv(BUILD_FLAG, raising=False)  # a downloaded chapter, myst-nb installed or not
    table = markdown_table(["n"], [[1]], caption="Held-out perplexity.", name="tbl-x")
    assert table.data.splitlines() == ["**Held-out perplexity.**", "", "| n |", "|---|", "| 1 |"]


def test_a_captioned_table_is_a_numbered_myst_table_with_its_label(monkeypatch):
    monkeypatch.setenv(BUILD_FLAG, "1")
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


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("1.1e-13", "1.1 × 10⁻¹³"),
        ("4e-07", "4 × 10⁻⁷"),
        ("-2.5E+04", "−2.5 × 10⁴"),
        ("3.0e+00", "3.0"),
        ("0.0e+00", "0"),
        (
            "differs by 5.7e-14 nats; 12.5 % of 1,024",
            "differs by 5.7 × 10⁻¹⁴ nats; 12.5 % of 1,024",
        ),
        ("inf", "∞"),
        ("-inf", "−∞"),
        ("nan", "—"),
        ("infinite", "infinite"),
        ("v1.2e3x", "v1.2e3x"),
        ("lr = 3e-3", "lr = 3 × 10⁻³"),
    ],
)
def test_numbers_are_written_for_people(text, shown):
    assert for_people(text) == shown


def test_table_cells_show_no_e_notation_or_raw_inf():
    table = markdown_table(["n", "ppl", "gap"], [[2, f"{float('inf'):,.1f}", f"{4.4e-16:.1e}"]])
    assert table.data.splitlines()[-1] == "| 2 | ∞ | 4.4 × 10⁻¹⁶ |"


def test_threads_and_machines_are_said_of_the_run():
    assert threads_in_words(1) == "one CPU thread"
    assert threads_in_words(2) == "two CPU threads"
    assert threads_in_words(64) == "64 CPU threads"
    assert machine_in_words("x86_64, 1 thread") == "one CPU thread (x86-64)"
    assert machine_in_words("arm64, 8 threads") == "eight CPU threads (arm64)"
    assert machine_in_words("a lab machine") == "a lab machine"  # not where_measured's: as stored
    with pytest.raises(ValueError, match="at least one thread"):
        threads_in_words(0)
