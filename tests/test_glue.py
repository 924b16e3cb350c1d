"""seqmodels.glue: myst-nb's glue during the book's build, and a plain display without myst-nb."""

import sys

import pytest

from seqmodels.glue import glue


def test_without_myst_nb_glue_shows_the_value_or_nothing(monkeypatch):
    shown = []
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # `import myst_nb` now raises ImportError
    monkeypatch.setattr("IPython.display.display", lambda value: shown.append(value))
    glue("hidden", 1.5, display=False)
    glue("shown", 2.5)
    assert shown == [2.5]


def test_with_myst_nb_glue_records_the_value_for_the_text(monkeypatch):
    pytest.importorskip("myst_nb")
    import myst_nb.ext.glue as myst_glue

    published = []
    monkeypatch.setattr(
        myst_glue, "ipy_display", lambda data, raw, metadata: published.append((data, metadata))
    )
    glue("ch_value", 3.25, display=False)
    ((data, metadata),) = published
    assert data["application/papermill.record/text/plain"] == "3.25"
    assert metadata["scrapbook"]["name"] == "ch_value"
