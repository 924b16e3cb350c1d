"""The book's HTML rewrites (book/_ext/site_assets.py), on the HTML the theme writes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))

from site_assets import captions_outside_tables  # noqa: E402

THEME_TABLE = (
    '<p>Before.</p><div class="pst-scrollable-table-container"><table class="table" '
    'id="tbl-x">\n<caption><span class="caption-number">Table 8.4 </span><span '
    'class="caption-text">A wide table.</span><a class="headerlink" href="#tbl-x">#</a>'
    "</caption>\n<thead><tr><th>d</th></tr></thead><tbody><tr><td>3</td></tr></tbody></table>"
    "</div><p>After.</p>"
)


def test_a_tables_caption_moves_above_its_scrolled_box_and_still_names_the_table():
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(captions_outside_tables(THEME_TABLE), "html.parser")
    figure = soup.select_one("div.course-table")
    caption, box = figure.find_all(recursive=False)
    assert caption["class"] == ["course-table-caption"] and caption["id"] == "tbl-x-caption"
    assert caption.get_text() == "Table 8.4 A wide table.#"
    assert box["class"] == ["pst-scrollable-table-container"]
    table = box.find("table")
    assert table["id"] == "tbl-x" and table["aria-labelledby"] == "tbl-x-caption"
    assert table.find("caption") is None and table.find("td").get_text() == "3"
    assert soup.get_text().startswith("Before.") and soup.get_text().endswith("After.")


def test_a_page_without_captioned_tables_is_left_as_it_is():
    plain = '<div class="pst-scrollable-table-container"><table><tr><td>1</td></tr></table></div>'
    assert captions_outside_tables(plain) == plain
    assert captions_outside_tables("<p>no table</p>") == "<p>no table</p>"
