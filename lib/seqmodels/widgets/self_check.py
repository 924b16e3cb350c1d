r"""Self-checks: a few short questions at the end of each chapter, with immediate feedback.

A `Question` is either multiple choice (``choices`` and the index of the right one) or numeric (an
``answer`` and an absolute ``tolerance``), with an ``explanation`` that says why the right answer
is right and what the tempting wrong one misses. Chapter 1's to 9's questions are in
`seqmodels.widgets.self_checks`.

`self_check(chapter)` serves two readers, like an `Explorer`:

- in a reader's notebook it returns a `SelfCheck` (an ipywidgets ``VBox``): per question the
  prompt, radio buttons (or a box for a number), a "Check" button and a feedback line;
- in the book's build (`seqmodels.glue.in_book_build`) it returns `IPython.display.Markdown`, the
  static form: the numbered questions with their choices, each followed by a MyST dropdown that
  holds the answer and its explanation (the site renders Markdown outputs as MyST).

No score is kept, nothing is written to disk and nothing is sent anywhere: pressing "Check" only
changes the text of that question's feedback line.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass

from IPython.display import Markdown

from ..glue import in_book_build

#: the labels of a question's choices
LETTERS = "abcdefgh"
#: a MyST role (``{ref}`x` ``) or directive fence, which a self-check's plain Markdown must not hold
_MYST = re.compile(r"\{[a-z][\w:-]*\}`|^:::|^```", re.M)


@dataclass(frozen=True)
class Question:
    r"""One self-check question.

    `prompt` and `explanation` are plain Markdown (``**bold**``, ``*italic*``, `` `code` ``) with
    ``$inline math$``; no MyST roles or directives. Give either `choices` (2 to 8 distinct strings)
    and `answer`, the index of the right one, or no choices, a numeric `answer` and an absolute
    `tolerance` $\ge 0$.
    """

    prompt: str
    answer: int | float
    explanation: str
    choices: tuple[str, ...] = ()
    tolerance: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        for text in (self.prompt, self.explanation, *self.choices):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"expected a non-empty text, got {text!r} in {self.prompt!r}")
            if text.count("$") % 2 or "$$" in text:
                raise ValueError(f"expected balanced $inline math$, got {text!r}")
            if _MYST.search(text):
                raise ValueError(f"expected plain Markdown without MyST roles, got {text!r}")
        if isinstance(self.answer, bool) or not isinstance(self.answer, int | float):
            raise TypeError(f"expected a numeric answer, got {self.answer!r}")
        if self.is_numeric:
            if self.tolerance is None or not self.tolerance >= 0 or math.isinf(self.tolerance):
                raise ValueError(
                    f"expected a finite tolerance >= 0 for the numeric question {self.prompt!r}, "
                    f"got {self.tolerance!r} (or give choices)"
                )
            if not math.isfinite(self.answer):
                raise ValueError(f"expected a finite answer, got {self.answer!r}")
            return
        if self.tolerance is not None:
            raise ValueError(f"a multiple-choice question takes no tolerance: {self.prompt!r}")
        if not 2 <= len(self.choices) <= len(LETTERS):
            raise ValueError(
                f"expected 2 to {len(LETTERS)} choices, got {len(self.choices)} in {self.prompt!r}"
            )
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"expected distinct choices, got {self.choices!r}")
        if not isinstance(self.answer, int) or not 0 <= self.answer < len(self.choices):
            raise ValueError(
                f"expected the answer to be a choice's index, 0 to {len(self.choices) - 1}, "
                f"got {self.answer!r} in {self.prompt!r}"
            )

    @property
    def is_numeric(self) -> bool:
        """Whether the reader types a number (no choices) rather than picking a choice."""
        return not self.choices

    def is_right(self, response: int | float | None) -> bool:
        """Whether `response` (a choice's index, or a number) is the right answer."""
        if response is None:
            return False
        if self.is_numeric:
            slack = 1e-12 * max(1.0, abs(self.answer))  # a typed boundary value is right
            return abs(float(response) - self.answer) <= self.tolerance + slack
        return response == self.answer

    @property
    def answer_text(self) -> str:
        """The right answer as the static form writes it: ``(b)`` or the number."""
        if self.is_numeric:
            return format_number(self.answer, self.tolerance)
        return f"({LETTERS[self.answer]})"


def format_number(value: float, tolerance: float) -> str:
    """`value` to the decimals `tolerance` resolves (``0.122`` at ``1e-3``), thousands with commas."""
    decimals = 0 if tolerance <= 0 else max(0, -math.floor(math.log10(tolerance)))
    value = round(value, decimals)
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}".rstrip("0")


def to_html(text: str) -> str:
    """`text`'s plain Markdown (bold, italic, code) as HTML, its ``$math$`` left for MathJax."""
    parts = re.split(r"(\$[^$]+\$)", text)
    out = []
    for part in parts:
        if part.startswith("$") and part.endswith("$") and len(part) > 1:
            out.append(html.escape(part, quote=False))
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"`([^`]+)`", r"<code>\1</code>", part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", part)
        part = re.sub(r"\*([^*]+)\*", r"<i>\1</i>", part)
        out.append(part)
    return "".join(out)


def _parse_number(text: str) -> float | None:
    """The number a reader typed (``1,000``, ``0.5``, ``1e-3``), or None if it is not one."""
    try:
        value = float(text.strip().replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _widgets():
    import ipywidgets

    return ipywidgets


class QuestionView(_widgets().VBox):
    """One question as widgets: the prompt, an answer control, "Check", and a feedback line."""

    def __init__(self, number: int, question: Question) -> None:
        widgets = _widgets()
        self.question = question
        self.prompt = widgets.HTMLMath(f"<b>{number}.</b> {to_html(question.prompt)}")
        items = [self.prompt]
        if question.is_numeric:
            self.control = widgets.Text(placeholder="a number", description="Answer:")
        else:
            listed = "<br>".join(
                f"<b>({letter})</b> {to_html(choice)}"
                for letter, choice in zip(LETTERS, question.choices, strict=False)
            )
            self.choices = widgets.HTMLMath(listed)
            items.append(self.choices)
            self.control = widgets.RadioButtons(
                options=[(f"({LETTERS[i]})", i) for i in range(len(question.choices))],
                value=None,
                orientation="horizontal",
                description="Answer:",
            )
        self.check = widgets.Button(description="Check", tooltip="Check this answer")
        self.feedback = widgets.HTMLMath("")
        self.check.on_click(self._on_check)
        row = widgets.HBox(  # wraps on a phone, as an explorer's controls do
            [self.control, self.check], layout=widgets.Layout(flex_flow="row wrap")
        )
        super().__init__([*items, row, self.feedback])

    def response(self) -> int | float | None:
        """The reader's current answer: a choice's index or a number; None if none is given."""
        if self.question.is_numeric:
            return _parse_number(self.control.value)
        return self.control.value

    def _on_check(self, *_) -> None:
        response = self.response()
        if response is None:
            ask = "Type a number first." if self.question.is_numeric else "Choose an answer first."
            self.feedback.value = f"<i>{ask}</i>"
            return
        why = to_html(self.question.explanation)
        if self.question.is_right(response):
            self.feedback.value = f"<b>✓ Right.</b> {why}"
        else:
            right = html.escape(self.question.answer_text)
            self.feedback.value = f"<b>✗ Not quite</b>; the answer is <b>{right}</b>. {why}"


class SelfCheck(_widgets().VBox):
    """A chapter's questions, each checked on its own; no score is kept."""

    def __init__(self, questions: list[Question], title: str = "") -> None:
        widgets = _widgets()
        self.questions = [QuestionView(number, q) for number, q in enumerate(questions, start=1)]
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        super().__init__([*header, *self.questions])


#: the static form's first line: what the notebook does with the same questions
STATIC_LEAD = (
    "*In the chapter's notebook each question has a* Check *button that says at once whether "
    "your answer is right, and why; nothing is recorded or sent anywhere. Here each answer is in "
    "its dropdown.*"
)


def static_markdown(questions: list[Question]) -> str:
    """The questions as MyST Markdown: a line on the live form, then the questions numbered,
    choices listed, each answer in a dropdown."""
    blocks = [STATIC_LEAD]
    for number, q in enumerate(questions, start=1):
        lines = [f"**{number}.** {q.prompt}", ""]
        if q.is_numeric:
            lines += ["*Answer with a number.*", ""]
        else:
            lines += [
                f"- **({letter})** {choice}"
                for letter, choice in zip(LETTERS, q.choices, strict=False)
            ]
            lines.append("")
        lines += [":::{dropdown} Answer", f"**{q.answer_text}** {q.explanation}", ":::"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def questions_for(chapter: str) -> list[Question]:
    """The self-check questions of `chapter` ("ch01" to "ch09")."""
    from .self_checks import SELF_CHECKS

    if chapter not in SELF_CHECKS:
        raise ValueError(f"expected a chapter among {sorted(SELF_CHECKS)}, got {chapter!r}")
    return list(SELF_CHECKS[chapter])


def self_check(chapter: str) -> SelfCheck | Markdown:
    """The self-check of `chapter` ("ch01" … "ch09"): live widgets in a reader's notebook, the
    static Markdown (answers in dropdowns) in the book's build. Use as a cell's last expression."""
    questions = questions_for(chapter)
    if in_book_build():
        return Markdown(static_markdown(questions))
    return SelfCheck(questions, title="Self-check: pick an answer and press Check.")
