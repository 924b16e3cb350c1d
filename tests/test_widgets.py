"""`seqmodels.widgets.Explorer`, the shape of every chapter's explorer: its controls drive its view."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest

from seqmodels.widgets import Explorer


def line_view(slope, points):
    figure, ax = plt.subplots()
    ys = [slope * i for i in range(points)]
    ax.plot(range(points), ys)
    return figure, {"last": ys[-1], "points": points}


@pytest.fixture
def explorer():
    controls = {
        "slope": widgets.FloatSlider(value=1.0, min=0.0, max=5.0),
        "points": widgets.IntSlider(value=3, min=1, max=10),
    }
    return Explorer(controls, line_view, title="a line")


def test_the_view_is_drawn_at_the_default_settings(explorer):
    assert explorer.result == {"last": 2.0, "points": 3}
    assert explorer.redraws == 1 and explorer.figure is not None
    assert explorer.seconds >= 0


def test_the_median_of_repeated_redraws_keeps_the_settings(explorer, monkeypatch):
    explorer.set(slope=2.0)
    ticks = iter([0.0, 0.3, 1.0, 1.1, 2.0, 2.9])  # redraws of 0.3, 0.1 and 0.9 s
    monkeypatch.setattr("seqmodels.widgets.explorer.time.perf_counter", lambda: next(ticks))
    assert explorer.median_seconds(repeats=3) == pytest.approx(0.3)
    assert explorer.redraws == 5 and explorer.result["last"] == 4.0
    with pytest.raises(ValueError, match="at least one redraw"):
        explorer.median_seconds(repeats=0)


def test_moving_a_control_redraws_with_its_value(explorer):
    first = explorer.figure
    explorer.controls["slope"].value = 2.5
    assert explorer.result["last"] == 5.0 and explorer.redraws == 2
    assert explorer.figure is not first
    explorer.controls["points"].value = 5
    assert explorer.result == {"last": 10.0, "points": 5}


def test_set_changes_several_controls_with_one_redraw(explorer):
    assert explorer.set(slope=3.0, points=4) == {"last": 9.0, "points": 4}
    assert explorer.redraws == 2
    explorer.controls["slope"].value = 1.0  # still observed after `set`
    assert explorer.result["last"] == 3.0


def test_an_unknown_control_says_which_exist(explorer):
    with pytest.raises(KeyError, match="points"):
        explorer.set(slop=1.0)


def test_it_is_a_widget_with_its_controls_above_the_figure(explorer):
    assert isinstance(explorer, widgets.VBox)
    title, row, output = explorer.children
    assert list(row.children) == list(explorer.controls.values())
    assert isinstance(output, widgets.Output)


def test_every_explorers_static_figure_is_checked_for_legibility_at_both_widths():
    """Each explorer module's tests draw its figure and check it with `assert_legible` (the 352-px
    phone column and the 784-px desktop column), so a new explorer cannot ship unchecked."""
    from pathlib import Path

    import seqmodels.widgets as package

    modules = sorted(
        p.stem
        for p in Path(package.__file__).parent.glob("*.py")
        # the self-checks are widgets without a figure (tests/test_self_check.py drives them)
        if p.stem not in {"__init__", "explorer", "self_check", "self_checks"}
    )
    assert modules, "no explorer modules found"
    tests = Path(__file__).parent
    for name in modules:
        source = (tests / f"test_widgets_{name}.py").read_text(encoding="utf-8")
        assert "assert_legible(explorer.figure)" in source, name
