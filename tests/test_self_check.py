"""`seqmodels.widgets.self_check`: the chapters' self-checks, driven as a reader drives them (pick,
press Check, read the feedback), and their static MyST form for the site."""

import builtins
import math
import os
import re
import socket
import sys
from pathlib import Path

import ipywidgets as widgets
import pytest
from IPython.display import Markdown
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from seqmodels.glue import BUILD_FLAG
from seqmodels.widgets.self_check import (
    LETTERS,
    Question,
    SelfCheck,
    format_number,
    questions_for,
    self_check,
    static_markdown,
    to_html,
)
from seqmodels.widgets.self_checks import SELF_CHECKS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

CHAPTERS = [f"ch{i:02d}" for i in range(1, 10)]
#: the book's MyST extensions that the static form uses (_config.yml)
MYST = create_md_parser(
    MdParserConfig(enable_extensions={"colon_fence", "dollarmath", "amsmath"}), RendererHTML
)


@pytest.fixture(autouse=True)
def reader(monkeypatch):
    """A reader's notebook, not the book's build, unless a test says otherwise."""
    monkeypatch.delenv(BUILD_FLAG, raising=False)


def choice_question(**kw) -> Question:
    base = dict(
        prompt="Which is $x_1$?",
        choices=("one", "two", "three"),
        answer=1,
        explanation="Because. Really.",
    )
    return Question(**{**base, **kw})


def numeric_question(**kw) -> Question:
    base = dict(prompt="What is $1/8$?", answer=0.125, tolerance=1e-3, explanation="It is.")
    return Question(**{**base, **kw})


def check(view, value):
    """Set the reader's answer in one question's widgets and press Check; the feedback's text."""
    view.control.value = value
    view.check.click()
    return view.feedback.value


# --- the questions ---------------------------------------------------------------------------


def test_every_chapter_has_four_to_six_questions():
    assert sorted(SELF_CHECKS) == CHAPTERS
    for chapter in CHAPTERS:
        questions = questions_for(chapter)
        assert 4 <= len(questions) <= 6, chapter
        assert all(isinstance(q, Question) for q in questions)
        # each chapter mixes choices with at least one computation
        assert any(q.is_numeric for q in questions), chapter
        assert any(not q.is_numeric for q in questions), chapter


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_explanation_is_two_to_four_sentences(chapter):
    for q in questions_for(chapter):
        # a sentence ends at ., ? or ! followed by a capital, math or code (not inside math)
        prose = re.sub(r"\$[^$]+\$", "M", q.explanation)
        sentences = re.split(r"(?<=[.?!])\s+(?=[A-Z`M])", prose.strip())
        assert 2 <= len(sentences) <= 4, (chapter, q.prompt, sentences)


def test_the_right_choice_is_not_always_in_one_place():
    places = {q.answer for qs in SELF_CHECKS.values() for q in qs if not q.is_numeric}
    assert places == {0, 1, 2, 3}


def test_unknown_chapters_say_which_exist():
    with pytest.raises(ValueError, match="ch01"):
        self_check("ch10")


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(answer=3), "0 to 2"),
        (dict(answer=-1), "0 to 2"),
        (dict(answer=1.0), "index"),
        (dict(answer=True), "numeric answer"),
        (dict(choices=("only",), answer=0), "2 to 8 choices"),
        (dict(choices=("a", "a"), answer=0), "distinct"),
        (dict(choices=("a", " "), answer=0), "non-empty"),
        (dict(tolerance=0.1), "no tolerance"),
        (dict(prompt=""), "non-empty"),
        (dict(explanation="  "), "non-empty"),
        (dict(prompt="See {ref}`sec-x`."), "MyST"),
        (dict(explanation=":::{note}\nx\n:::"), "MyST"),
        (dict(prompt="Is $x a cost?"), "balanced"),
        (dict(prompt="$$x$$"), "balanced"),
    ],
)
def test_bad_choice_questions_raise(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        choice_question(**kw)


def test_empty_choices_need_a_numeric_answer_with_a_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        choice_question(choices=(), answer=1)
    with pytest.raises(ValueError, match="tolerance"):
        numeric_question(tolerance=-0.1)
    with pytest.raises(ValueError, match="tolerance"):
        numeric_question(tolerance=float("nan"))
    with pytest.raises(ValueError, match="finite answer"):
        numeric_question(answer=float("inf"))


def test_questions_are_frozen_and_choices_a_tuple():
    q = choice_question(choices=["one", "two"])
    assert q.choices == ("one", "two")
    with pytest.raises(AttributeError):
        q.answer = 0


def test_numbers_are_written_to_the_tolerance_s_decimals():
    assert format_number(0.121577, 1e-3) == "0.122"
    assert format_number(-0.3, 1e-6) == "-0.3"
    assert format_number(8192000.0, 0.0) == "8,192,000"
    assert format_number(1000.6931, 1e-3) == "1,000.693"


# --- the live widgets --------------------------------------------------------------------------


def test_a_reader_gets_one_view_per_question_with_the_right_controls():
    box = self_check("ch04")
    assert isinstance(box, SelfCheck) and isinstance(box, widgets.VBox)
    assert len(box.questions) == len(questions_for("ch04"))
    for number, (view, q) in enumerate(zip(box.questions, questions_for("ch04"), strict=True), 1):
        assert isinstance(view.prompt, widgets.HTMLMath)
        assert view.prompt.value.startswith(f"<b>{number}.</b>")
        assert isinstance(view.check, widgets.Button) and view.check.description == "Check"
        assert view.feedback.value == ""
        if q.is_numeric:
            assert isinstance(view.control, widgets.Text)
        else:
            assert isinstance(view.control, widgets.RadioButtons)
            assert view.control.value is None  # nothing chosen for the reader
            assert [label for label, _ in view.control.options] == [
                f"({letter})" for letter in LETTERS[: len(q.choices)]
            ]
            for choice in q.choices:
                assert to_html(choice) in view.choices.value


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_right_answer_is_right_and_every_wrong_one_is_wrong(chapter):
    box = self_check(chapter)
    for view, q in zip(box.questions, questions_for(chapter), strict=True):
        if q.is_numeric:
            assert "Right" in check(view, q.answer_text.replace(",", ""))
            wrong = f"{q.answer + 10 * q.tolerance + 1:.6f}"
            feedback = check(view, wrong)
            assert "Not quite" in feedback and q.answer_text in feedback
            continue
        assert check(view, q.answer).startswith("<b>✓ Right.</b>")
        assert to_html(q.explanation) in view.feedback.value
        for index in range(len(q.choices)):
            if index != q.answer:
                feedback = check(view, index)
                assert feedback.startswith("<b>✗ Not quite</b>")
                assert f"<b>{q.answer_text}</b>" in feedback
                assert to_html(q.explanation) in feedback


def test_a_numeric_answer_within_the_tolerance_is_right_and_outside_wrong():
    view = SelfCheck([numeric_question()]).questions[0]
    for typed in ("0.125", "0.1245", "0.126", " 0.124 ", "1.25e-1"):
        assert "Right" in check(view, typed), typed
    for typed in ("0.127", "0.12", "-0.125", "8"):
        assert "Not quite" in check(view, typed), typed
    big = SelfCheck([numeric_question(answer=8192000, tolerance=0)]).questions[0]
    assert "Right" in check(big, "8,192,000")
    assert "Not quite" in check(big, "8192001")


def test_checking_without_an_answer_asks_for_one():
    box = SelfCheck([choice_question(), numeric_question()])
    choice, number = box.questions
    choice.check.click()
    assert "Choose an answer first" in choice.feedback.value
    for typed in ("", "one eighth", "nan", "inf"):
        assert "Type a number first" in check(number, typed), typed


def test_prompts_keep_their_math_and_escape_html():
    html = to_html("The `<unk>` token, **bold**, *it* and $p(w_t \\mid w_{<t})$.")
    assert html == (
        "The <code>&lt;unk&gt;</code> token, <b>bold</b>, <i>it</i> and $p(w_t \\mid w_{&lt;t})$."
    )
    assert "$W_{hh} = \\rho Q$" in self_check("ch04").questions[0].prompt.value


def test_checking_keeps_no_score_and_changes_only_the_feedback():
    box = self_check("ch07")

    def states():
        return {w.model_id: w.get_state() for w in [box, *_descendants(box)]}

    before = states()
    view = box.questions[1]
    view.control.value = view.question.answer
    view.check.click()
    after = states()
    changed = {
        (model_id, key)
        for model_id in before
        for key in before[model_id]
        if before[model_id][key] != after[model_id][key]
    }
    assert changed == {
        (view.control.model_id, "index"),
        (view.feedback.model_id, "value"),
    }
    assert not any("score" in name.lower() for name in vars(box) | vars(view))


def _descendants(widget):
    for child in getattr(widget, "children", ()):
        yield child
        yield from _descendants(child)


def test_nothing_is_written_or_sent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    opened = []
    real_open = builtins.open

    def watch_open(file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax+"):
            opened.append(file)
        return real_open(file, mode, *args, **kwargs)

    def no_network(*_args, **_kwargs):
        raise AssertionError("a self-check opened a network connection")

    monkeypatch.setattr(builtins, "open", watch_open)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    for chapter in CHAPTERS:
        for view, q in zip(self_check(chapter).questions, questions_for(chapter), strict=True):
            check(view, q.answer_text.replace(",", "") if q.is_numeric else q.answer)
    assert opened == []
    assert os.listdir(tmp_path) == []


# --- the static form -------------------------------------------------------------------------


def test_in_the_book_s_build_the_static_form_is_markdown(monkeypatch):
    monkeypatch.setenv(BUILD_FLAG, "1")
    shown = self_check("ch04")
    assert isinstance(shown, Markdown)
    assert shown.data == static_markdown(questions_for("ch04"))
    monkeypatch.setenv(BUILD_FLAG, "0")
    assert isinstance(self_check("ch04"), SelfCheck)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_static_form_is_valid_myst_with_each_answer_in_a_dropdown(chapter):
    questions = questions_for(chapter)
    text = static_markdown(questions)
    tokens = MYST.parse(text)
    fences = [t for t in tokens if t.type == "colon_fence"]
    assert [t.info for t in fences] == ["{dropdown} Answer"] * len(questions)
    assert text.count("\n:::\n") == len(questions)  # every dropdown is closed
    numbered = [
        t.content for t in tokens if t.type == "inline" and re.match(r"\*\*\d+\.\*\*", t.content)
    ]
    assert len(numbered) == len(questions)
    for number, (q, prompt, fence) in enumerate(zip(questions, numbered, fences, strict=True), 1):
        assert prompt == f"**{number}.** {' '.join(q.prompt.split())}"
        assert fence.content.startswith(f"**{q.answer_text}** ")
        if not q.is_numeric:  # the answer's letter is one of the listed choices
            assert f"- **{q.answer_text}** {q.choices[q.answer]}" in text
    # all math is parsed as math, in the questions and inside the dropdowns
    for source in [text, *(f.content for f in fences)]:
        for token in MYST.parse(source):
            for child in token.children or []:
                if child.type == "text":
                    assert "$" not in child.content, child.content


@pytest.mark.built
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_site_shows_every_chapter_s_self_check_with_answers_in_dropdowns(chapter):
    """The built site (`make book`): each chapter's last page shows its questions, each answer in
    a closed dropdown with its math typeset, and no widget."""
    from chapters import chapter_pages

    site = ROOT / "_build" / "html"
    if not (site / "index.html").is_file():
        pytest.fail("no built site: run `make book` first")
    (last,) = [p[-1] for landing, p in chapter_pages(ROOT).items() if f"/{chapter}_" in landing]
    html = (site / f"{last}.html").read_text(encoding="utf-8")
    section = html.split('id="self-check"', 1)[1].split('id="exercises"', 1)[0]
    assert section.count("<details") == len(questions_for(chapter))
    assert ":::" not in section and "{dropdown}" not in section
    body = section.split("<details", 1)[1]
    assert '<span class="math notranslate nohighlight">' in body or "\\(" in body
    assert "ipywidgets" not in section.lower()


# --- the answers, against the library and PyTorch -----------------------------------------------


def question(chapter: str, words: str) -> Question:
    """The one question of `chapter` whose prompt holds `words`."""
    (found,) = [q for q in questions_for(chapter) if words in q.prompt]
    return found


def assert_answer(q: Question, computed: float) -> None:
    assert q.is_right(computed), (q.prompt, q.answer, computed)
    assert q.is_right(float(q.answer_text.replace(",", ""))), q.answer_text


def test_numeric_answers_are_what_pytorch_and_the_library_compute():
    import torch
    import torch.nn.functional as F

    from seqmodels.attention import masked_softmax
    from seqmodels.convolution import receptive_field
    from seqmodels.decoding import temperature, top_p_filter
    from seqmodels.gradients import clip_grad_norm

    torch.manual_seed(0)
    eighths = F.cross_entropy(torch.zeros(5, 8), torch.arange(5))  # every token 1/8
    assert_answer(question("ch01", "probability $1/8$"), eighths.exp().item())

    z = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64).log().requires_grad_()
    F.cross_entropy(z[None], torch.tensor([0])).backward()
    assert_answer(question("ch02", "one-hot target"), z.grad[0].item())
    big = torch.tensor([1000.0, 1000.0], dtype=torch.float64)
    assert_answer(question("ch02", "log-sum-exp"), torch.logsumexp(big, 0).item())

    count = sum(p.numel() for p in torch.nn.RNN(10, 20).parameters())
    assert_answer(question("ch03", "Elman RNN layer"), count)

    q_mat, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))
    product = torch.linalg.matrix_power(0.9 * q_mat, 20)
    assert_answer(question("ch04", "linear RNN"), torch.linalg.matrix_norm(product, 2).item())
    first, second = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(2))
    first.grad, second.grad = torch.tensor([3.0]), torch.tensor([0.0, 4.0])
    clip_grad_norm([first, second], 1.0)
    assert_answer(question("ch04", "norms 3 and 4"), first.grad.norm().item())

    count = sum(p.numel() for p in torch.nn.LSTM(10, 20).parameters())
    assert_answer(question("ch05", "LSTM layer"), count)

    weights = masked_softmax(torch.tensor([[[2.0, 0.0, 1.0]]]), torch.tensor([[1, 1, 0]]).bool())
    assert_answer(question("ch07", "third key is padding"), weights[0, 0, 0].item())

    assert_answer(question("ch08", "receptive field"), receptive_field(2, [1, 2, 4, 8]))

    logits = torch.tensor([math.log(3.0), 0.0])
    sharpened = torch.softmax(temperature(logits, 0.5), -1)
    assert_answer(question("ch09", "temperature"), sharpened[0].item())
    nucleus = top_p_filter(torch.tensor([0.5, 0.3, 0.15, 0.05]).log(), 0.9)
    assert_answer(question("ch09", "top-$p$"), torch.isfinite(nucleus).sum().item())


def test_the_bpe_answer_is_the_library_s_first_merge():
    from seqmodels.bpe import train_bpe

    q = question("ch06", "BPE")
    bpe = train_bpe({"low": 5, "lowest": 2, "newer": 6, "wider": 3}, 1)
    assert q.choices[q.answer] == "`" + " ".join(bpe.merges[0]) + "`"


def test_the_greedy_answer_is_greedy_s_sequence_and_not_the_best():
    q = question("ch09", "greedy decoding returns")
    tree = {"A": (0.6, {"x": 0.5, "y": 0.5}), "B": (0.4, {"z": 1.0})}
    first = max(tree, key=lambda w: tree[w][0])
    p_first, rest = tree[first]
    greedy = p_first * max(rest.values())
    best = max(p * p2 for p, nxt in tree.values() for p2 in nxt.values())
    assert_answer(q, greedy)
    assert best > greedy
