"""Interactive explorers for the live notebook (ipywidgets 8), one per chapter, each built on the
library and shaped as an `Explorer` (controls, a figure, and the numbers it shows). The static site
shows each explorer's figure at its default settings.

Chapters import an explorer from its module (``from seqmodels.widgets.decoding import ...``), so
the book's execution cache sees which library modules a chapter uses.
"""

from .explorer import LIVE_NOTE, Explorer
from .language_models import next_word_explorer

__all__ = ["LIVE_NOTE", "Explorer", "next_word_explorer"]
