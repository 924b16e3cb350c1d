"""`Explorer`: the one shape of every chapter's interactive view (ipywidgets 8).

An explorer is a row of controls and a *view*: a function of the controls' values that returns a
matplotlib figure and a dict of what it computed (the numbers the figure shows). Changing a control
redraws the view. The same object serves three readers:

- a student in the downloaded notebook moves the controls (`Explorer` is an ipywidgets ``VBox``);
- the static site, which has no kernel, shows `Explorer.figure` at the default settings, glued as a
  figure with alt text (the chapter's ``{glue:figure}``) and a line saying the notebook makes it live;
- a test sets ``explorer.controls[name].value`` and checks `Explorer.result` against the library.

`Explorer.seconds` is how long the last redraw took; `Explorer.median_seconds` redraws a few times
at the same settings and gives the median, the figure a chapter states (one redraw on a busy
machine says little).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import matplotlib.pyplot as plt
from IPython import get_ipython
from IPython.display import display
from matplotlib.figure import Figure

#: a line under each explorer's static figure on the site
LIVE_NOTE = "In the downloaded notebook the controls above this figure are live."


def _ipywidgets():
    import ipywidgets

    return ipywidgets


class Explorer(_ipywidgets().VBox):
    """Controls and a view that redraws when any of them changes.

    `view(**values)` gets the controls' current values by name and returns ``(figure, result)``.
    Controls are laid out in a wrapping row above the figure (one per line on a phone).
    """

    def __init__(
        self,
        controls: Mapping[str, Any],
        view: Callable[..., tuple[Figure, dict]],
        title: str = "",
    ) -> None:
        widgets = _ipywidgets()
        self.controls = dict(controls)
        self._view = view
        self.output = widgets.Output()
        self.figure: Figure | None = None
        self.result: dict = {}
        self.seconds = 0.0
        self.redraws = 0
        header = [widgets.HTML(f"<b>{title}</b>")] if title else []
        row = widgets.HBox(
            list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap")
        )
        super().__init__([*header, row, self.output])
        for control in self.controls.values():
            control.observe(self.update, names="value")
        self.update()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def update(self, *_) -> None:
        """Recompute the view for the current values and show it."""
        start = time.perf_counter()
        figure, result = self._view(**self.values())
        self.seconds = time.perf_counter() - start
        if self.figure is not None and self.figure is not figure:
            plt.close(self.figure)
        self.figure, self.result = figure, dict(result)
        self.redraws += 1
        if get_ipython() is not None:  # in a kernel; a plain script or test only keeps `figure`
            with self.output:
                self.output.clear_output(wait=True)
                display(figure)
        plt.close(figure)  # shown once, in the output area; kept in `self.figure` for the site

    def median_seconds(self, repeats: int = 5) -> float:
        """Redraw `repeats` times at the current settings; the median of those redraws' seconds."""
        if repeats < 1:
            raise ValueError(f"expected at least one redraw, got repeats={repeats}")
        times = []
        for _ in range(repeats):
            self.update()
            times.append(self.seconds)
        return statistics.median(times)

    def set(self, **values: Any) -> dict:
        """Set several controls at once (one redraw) and return the new `result`."""
        with self.hold_trait_notifications():
            for control in self.controls.values():
                control.unobserve(self.update, names="value")
            try:
                for name, value in values.items():
                    if name not in self.controls:
                        raise KeyError(
                            f"no control {name!r}; this explorer has {sorted(self.controls)}"
                        )
                    self.controls[name].value = value
            finally:
                for control in self.controls.values():
                    control.observe(self.update, names="value")
        self.update()
        return self.result


def choose_model(models: Mapping[str, Any], model: str | None, kind: type) -> str:
    """The name of the model an explorer starts with (`model`, or the first of `models`), after
    checking that `models` is a non-empty mapping of names to `kind` instances."""
    if not models:
        raise ValueError(f"expected at least one {kind.__name__} model, got none")
    for name, m in models.items():
        if not isinstance(m, kind):
            raise TypeError(
                f"expected models[{name!r}] to be a {kind.__name__}, got {type(m).__name__}"
            )
    names = list(models)
    model = names[0] if model is None else model
    if model not in models:
        raise ValueError(f"expected model to be one of {names}, got {model!r}")
    return model
