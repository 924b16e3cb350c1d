"""The MyST → Markdown rules of the downloadable chapter notebooks (book/_ext/myst_markdown.py)."""

import base64
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))

from myst_markdown import Resolved, to_markdown  # noqa: E402


def resolved(**kw) -> Resolved:
    base = dict(
        glue={"ppl": "47.0312", "n": "7917"},
        format_glue=lambda value, spec: format(float(value), spec),
        equations={"eq-chain": "1.1"},
        eqref_format="Eq. {number}",
        numbers={"fig-wall": ("figure", "1.3")},
        numfig_format={"figure": "Fig. %s"},
        labels={"sec-syn": "A synthetic language"},
        sections={"sec-syn": "1.8", "Smoothing": "1.4"},
        citations={"bengio2003": ("Bengio et al.", "2003"), "kn": ("Kneser and Ney", "1995")},
    )
    base.update(kw)
    return Resolved(**base)


def test_roles_become_the_text_the_page_shows():
    res = resolved()
    text, _ = to_markdown(
        "{cite:t}`bengio2003` reach {glue:text}`ppl:.1f` ({glue:text}`n:,.0f` types), "
        "see {eq}`eq-chain`, {numref}`fig-wall`, {ref}`sec-syn` and {cite:p}`bengio2003,kn`.",
        res,
    )
    assert text == (
        "Bengio et al. (2003) reach 47.0 (7,917 types), see Eq. 1.1, Fig. 1.3, "
        "*A synthetic language* (Section 1.8) and (Bengio et al., 2003; Kneser and Ney, 1995)."
    )
    assert res.problems == []


def test_admonitions_labels_and_equations():
    source = """(sec-x)=
## Smoothing

:::{admonition} In this chapter
:class: tip
1. one {glue:text}`ppl:.0f`
:::

$$
p = q
$$ (eq-chain)
"""
    text, _ = to_markdown(source, resolved())
    assert text == (
        "## 1.4 Smoothing\n\n> **In this chapter**\n>\n> 1. one 47\n\n$$\np = q\n\\tag{1.1}\n$$"
    )


def test_code_is_left_alone_and_unknown_references_are_reported():
    res = resolved()
    text, _ = to_markdown("```python\nx = '{eq}`a`'\n```\n`{cite}` and {eq}`missing`", res)
    assert text.startswith("```python\nx = '{eq}`a`'\n```")
    assert "`{cite}`" in text
    assert res.problems == ["equation 'missing' has no number"]


def test_label_style_citations_read_as_on_the_page():
    res = resolved(
        cite_style="label",
        citations={"bengio2003": ("Bengio et al.", "2003", "BDVJ03"), "kn": ("K", "1995", "KN95")},
        bibliography=["\\[BDVJ03\\] Yoshua Bengio, …"],
    )
    text, _ = to_markdown("{cite:t}`bengio2003` and {cite}`bengio2003,kn`.", res)
    assert text == "Bengio et al. [BDVJ03] and [BDVJ03, KN95]."
    listing, _ = to_markdown("```{bibliography}\n:filter: docname in docnames\n```", res)
    assert listing == "- \\[BDVJ03\\] Yoshua Bengio, …"


def test_a_pages_key_prefix_is_stripped_from_its_citations():
    """A work cited on two pages is listed on each under a per-page key (sphinxcontrib-bibtex's
    `:keyprefix:`); the notebook shows the work, not the prefixed key."""
    res = resolved(key_prefix="ch2-")
    text, _ = to_markdown("{cite:t}`ch2-bengio2003` and {cite:p}`ch2-kn`.", res)
    assert text == "Bengio et al. (2003) and (Kneser and Ney, 1995)."
    assert not res.problems


def test_a_glued_figure_becomes_an_attachment_with_its_number_and_caption():
    res = resolved(glue_images={"fig_wall": ("image/svg+xml", "<svg xmlns='x'/>")})
    source = "```{glue:figure} fig_wall\n:name: fig-wall\n:alt: A wall.\n\nThe wall.\n```"
    text, attachments = to_markdown(source, res)
    assert text == "![A wall.](attachment:fig_wall.svg)\n\n**Fig. 1.3:** The wall."
    encoded = attachments["fig_wall.svg"]["image/svg+xml"]
    assert base64.b64decode(encoded) == b"<svg xmlns='x'/>"  # JupyterLab reads base64 data URLs


def test_an_exercise_reads_as_its_number_its_text_and_its_hint():
    res = resolved(
        numbers={"ch04-ex1": ("exercise", "4.1")}, numfig_format={"exercise": "Exercise %s"}
    )
    source = """::::{exercise}
:label: ch04-ex1

Derive {eq}`eq-chain`.

:::{dropdown} Hint
Multiply the norms.
:::
::::"""
    text, _ = to_markdown(source, res)
    assert text == ("**Exercise 4.1.**\n\nDerive Eq. 1.1.\n\n> **Hint**\n>\n> Multiply the norms.")
    assert res.problems == []
