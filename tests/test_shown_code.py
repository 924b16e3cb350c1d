"""Each chapter shows the library code of the models it teaches, and every visible cell teaches.

- `SHOWN` is the fixed list of (page, library object) pairs: every model a chapter introduces,
  shown once in the book with ``literalinclude`` and ``:pyobject:`` (book/_ext/shown_code.py), so
  the page and the library cannot drift. Each shown object fits a screen (at most `MAX_LINES`
  lines) and opens with a one-line docstring that says what it implements.
- Before an object goes on a page, check `solutions/README.md`'s lists of what each problem set asks
  that neither the library nor the pages hold: nothing a set asks students to write is shown.
- Every code cell a reader sees on the site (not tagged to hide its input) is model code, a check
  against an oracle, or a training or evaluation call (`shown_code.classify_cell`): imports, tables,
  plots, glue, claims and asserts are hidden or one-line library calls.

The built pages are checked too (``built``): each shown object's code is on its page.
"""

import ast
import html
import re
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from chapters import chapter_pages, page_files  # noqa: E402
from myst_markdown import Resolved, to_markdown  # noqa: E402
from shown_code import (  # noqa: E402
    HIDDEN_TAGS,
    classify_cell,
    literal_includes,
    object_lines,
    shown_objects,
)

LIB = ROOT / "lib"
CHAPTERS = {Path(c).name: pages for c, pages in chapter_pages(ROOT).items()}  # stem -> pages
PAGES = page_files(ROOT)
MAX_LINES = 30
MAX_WIDTH = 96  # characters of a shown line: the desktop column at the page's 12.5-px code

#: (chapter, library objects in the order its pages show them)
SHOWN: dict[str, list[str]] = {
    "ch01_language_models": [
        "seqmodels.metrics.cross_entropy",
        "seqmodels.metrics.perplexity",
        "seqmodels.ngram.NGramLM._kn_prob",
        "seqmodels.feedforward.FeedForwardLM.forward",
    ],
    "ch02_backprop": [
        "seqmodels.autodiff.Node.tanh",
        "seqmodels.autodiff.Node.topological_order",
        "seqmodels.autodiff.Node.backward",
        "seqmodels.softmax.logsumexp",
    ],
    "ch03_rnn": [
        "seqmodels.rnn.ElmanRNN.forward",
        "seqmodels.rnn.RNNLM.forward",
        "seqmodels.rnn.bptt",
        "seqmodels.rnn.masked_sequence_nll",
        "seqmodels.rnn_tasks.SequenceClassifier.forward",
    ],
    "ch04_gradients": [
        "seqmodels.rnn.hidden_jacobian",
        "seqmodels.gradients.jacobian_chain",
        "seqmodels.gradients.scaled_orthogonal",
        "seqmodels.gradients.global_norm",
        "seqmodels.gradients.clip_grad_norm",
    ],
    "ch05_gated": [
        "seqmodels.gated.GatedRNN.step",
        "seqmodels.gated.ResidualRNN.step",
        "seqmodels.gated.lecture_gru_step",
        "seqmodels.gated.GRU.step",
        "seqmodels.gated.LSTM.step",
    ],
    "ch06_encoder_decoder": [
        "seqmodels.seq2seq.Seq2Seq.loss",
        "seqmodels.seq2seq.Seq2Seq.encode",
        "seqmodels.seq2seq.Seq2Seq.start",
        "seqmodels.seq2seq.Seq2Seq.decode_steps",
        "seqmodels.seq2seq.greedy_decode",
        "seqmodels.bpe.train_bpe",
        "seqmodels.bpe.learn_merges",
        "seqmodels.bpe.BPE.apply_merges",
    ],
    "ch07_attention": [
        "seqmodels.attention.additive_scores",
        "seqmodels.attention.masked_softmax",
        "seqmodels.attention.Attention.forward",
        "seqmodels.attention.scaled_dot_attention",
    ],
    "ch08_transformers": [
        "seqmodels.transformer.MultiHeadAttention.forward",
        "seqmodels.transformer.sinusoidal_positions",
        "seqmodels.norms.LayerNorm.forward",
        "seqmodels.transformer._Block._sublayer",
        "seqmodels.transformer.EncoderBlock.forward",
        "seqmodels.transformer.causal_mask",
        "seqmodels.transformer.TransformerLM.hidden_states",
        "seqmodels.transformer.TransformerLM.forward",
        "seqmodels.norms.RMSNorm.forward",
        "seqmodels.rotary.apply_rotary",
        "seqmodels.modern_block.SwiGLU.forward",
        "seqmodels.convolution.ConvLM.hidden_states",
        "seqmodels.finetuning.MaskedEncoder.classify",
        "seqmodels.transformer.TransformerSeq2Seq.encode",
        "seqmodels.transformer.TransformerSeq2Seq.decode",
    ],
    "ch09_decoding": [
        "seqmodels.decoding.beam_search",
        "seqmodels.decoding.temperature",
        "seqmodels.decoding.top_p_filter",
        "seqmodels.decoding.sample",
    ],
}


def _module_path(name: str) -> tuple[Path, str]:
    """(the module's file, the object's qualified name) of ``seqmodels.rnn.ElmanRNN.forward``."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = LIB.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return path, ".".join(parts[cut:])
    raise AssertionError(f"no module of the library holds {name!r}")


def test_the_list_names_every_chapter():
    assert set(SHOWN) == set(CHAPTERS)


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_each_chapter_shows_the_models_on_its_list(chapter):
    shown = []
    for page in CHAPTERS[chapter]:
        path = ROOT / f"{page}.md"
        source = path.read_text(encoding="utf-8")
        shown += shown_objects(source)
        for include in literal_includes(source):
            assert include.pyobject, f"{include.path}: show one object (`:pyobject:`), not a file"
            assert (path.parent / include.path).resolve().is_relative_to(LIB / "seqmodels")
            assert "dedent" in include.options or "." not in include.pyobject, (
                f"{include.pyobject}: a method is shown `:dedent:`"
            )
    assert shown == SHOWN[chapter]


def test_no_object_is_shown_twice():
    every = [name for names in SHOWN.values() for name in names]
    assert len(every) == len(set(every)), sorted({n for n in every if every.count(n) > 1})


@pytest.mark.parametrize("name", sorted({n for names in SHOWN.values() for n in names}))
def test_a_shown_object_fits_a_screen_and_says_what_it_implements(name):
    path, qualname = _module_path(name)
    lines = object_lines(path, qualname)
    assert len(lines) <= MAX_LINES, (
        f"{name} is {len(lines)} lines; at most {MAX_LINES} go on a page"
    )
    node = ast.parse("\n".join(lines)).body[0]
    doc = ast.get_docstring(node)
    assert doc, f"{name} has no docstring"
    first = " ".join(doc.strip().split("\n\n")[0].split())
    assert first.endswith("."), f"{name}'s docstring opens with one sentence, got {first!r}"
    wide = [line for line in lines if len(line) > MAX_WIDTH]
    assert not wide, f"{name}: lines wider than the page's {MAX_WIDTH} columns: {wide}"


@pytest.mark.parametrize("chapter", PAGES, ids=lambda p: p.relative_to(ROOT / "book").stem)
def test_every_visible_cell_is_model_code_an_oracle_check_or_a_run(chapter):
    notebook = jupytext.read(chapter)
    failing = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or HIDDEN_TAGS & set(cell.metadata.get("tags", [])):
            continue
        kind = classify_cell(cell.source)
        if kind.kind not in {"model", "oracle", "run"}:
            first = cell.source.strip().splitlines()[0][:60]
            failing.append(f"{kind.kind} ({kind.why}): {first}")
    assert not failing, f"{len(failing)} visible cells teach nothing:\n" + "\n".join(failing)


# -- the classifier itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("import torch", "harness"),
        ("from seqmodels.rnn import RNNLM", "harness"),
        ("x = train_lm(model, data)\nassert x < 3", "harness"),
        ("display(markdown_table(h, r))", "harness"),
        ("fig, ax = plt.subplots()", "harness"),
        ("caption = f'{n} steps'", "harness"),
        ("glue('ch1_ppl', ppl)", "harness"),
        ("ours = ElmanRNN(4, 8)\ntheirs = nn.RNN(4, 8)", "oracle"),
        ("torch.testing.assert_close(ours, theirs)", "oracle"),
        ("history = train_sentence_lm(model, batches, steps=300)", "run"),
        ("ppl = model.perplexity(corpus.test)", "run"),
        ("def step(h, x):\n    return torch.tanh(W @ h + U @ x)", "model"),
        ("n = 3\nwords = ['a', 'b']", "neither"),
    ],
)
def test_a_cell_is_classified_by_its_content(code, kind):
    assert classify_cell(code).kind == kind


def test_object_lines_read_what_pyobject_includes():
    lines = object_lines(LIB / "seqmodels" / "metrics.py", "perplexity")
    assert lines[0].startswith("def perplexity(")
    with pytest.raises(KeyError, match="defines no 'nothing_here'"):
        object_lines(LIB / "seqmodels" / "metrics.py", "nothing_here")


def test_the_downloaded_notebook_shows_the_same_code():
    source = (
        "```{literalinclude} ../lib/seqmodels/metrics.py\n"
        ":pyobject: perplexity\n:caption: seqmodels.metrics.perplexity\n```\n"
    )
    res = Resolved(source_dir=ROOT / "book")
    markdown, _ = to_markdown(source, res)
    code = "\n".join(object_lines(LIB / "seqmodels" / "metrics.py", "perplexity"))
    assert f"```python\n{code}\n```" in markdown
    assert "*seqmodels.metrics.perplexity*" in markdown
    assert not res.problems
    res = Resolved(source_dir=ROOT / "book")
    to_markdown(source.replace("perplexity\n:caption", "gone\n:caption"), res)
    assert res.problems and "defines no 'gone'" in res.problems[0]


@pytest.mark.built
@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_the_built_pages_hold_each_shown_objects_code(chapter):
    text = ""
    for page in CHAPTERS[chapter]:
        built = ROOT / "_build" / "html" / f"{page}.html"
        if not built.is_file():
            pytest.fail(f"run `make book` first: {built.relative_to(ROOT)} is missing")
        text += html.unescape(re.sub(r"<[^>]+>", "", built.read_text(encoding="utf-8")))
    for name in SHOWN[chapter]:
        path, qualname = _module_path(name)
        for line in object_lines(path, qualname):
            assert line.strip() in text, f"{name}: {line.strip()!r} is not on {chapter}'s pages"
