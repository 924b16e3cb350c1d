"""MyST Markdown → plain Markdown that JupyterLab renders as the page reads.

The chapters are MyST: roles (``{glue:text}``, ``{cite:t}``, ``{eq}``, ``{numref}``), directives
(``:::{admonition}``, ``{bibliography}``), labels ``(name)=`` and labelled display math. A notebook
downloaded from the site is read in JupyterLab, which knows none of them. `to_markdown` rewrites one
Markdown cell with what the *built* book resolved them to (collected from Sphinx's environment into a
`Resolved`): glued values as text, citations as author–year text, equation and figure numbers, section
titles; admonitions become block quotes with a bold title, labels disappear, labelled equations get
their number as ``\\tag``. Nothing here imports Sphinx, so the rules are unit-testable.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shown_code import object_lines

ADMONITIONS = {
    "admonition",
    "attention",
    "caution",
    "danger",
    "error",
    "hint",
    "important",
    "note",
    "seealso",
    "tip",
    "warning",
    "dropdown",
    "card",
    "topic",
    "sidebar",
    "margin",
    "epigraph",
    "pull-quote",
}
DROPPED = {"toctree", "tableofcontents", "contents", "include", "raw", "only", "glossary"}
CODE = {"code-block", "code", "sourcecode", "code-cell"}

ROLE_OR_CODE = re.compile(
    r"\{(?P<name>[a-zA-Z][\w:.-]*)\}`(?P<content>[^`]*)`|(?P<code>`+[^`]+?`+)"
)
LABEL = re.compile(r"^\s*\((?P<label>[^)\s]+)\)=\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[^}]+)\}\s*(?P<argument>.*)$")
MATH_END_LABEL = re.compile(r"^(?P<body>.*?)\$\$\s*\((?P<label>[^)]+)\)\s*$")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
TITLE_TARGET = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


@dataclass
class Resolved:
    """What the built book resolved each reference to, for one document."""

    glue: dict[str, str] = field(default_factory=dict)  # key -> text/plain (unformatted)
    glue_markdown: dict[str, str] = field(default_factory=dict)  # key -> text/markdown, if any
    glue_images: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (mime, base64)
    equations: dict[str, str] = field(default_factory=dict)  # label -> "1.3"
    eqref_format: str = "({number})"
    numbers: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (figtype, "1.2")
    numfig_format: dict[str, str] = field(default_factory=dict)  # figtype -> "Figure %s"
    labels: dict[str, str] = field(default_factory=dict)  # label -> section/figure title
    sections: dict[str, str] = field(default_factory=dict)  # label or heading text -> "1.8"
    docs: dict[str, str] = field(default_factory=dict)  # docname -> title
    citations: dict[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # key -> (authors, year, label)
    cite_style: str = "author_year"  # sphinxcontrib-bibtex's bibtex_reference_style: or "label"
    # the page's `{bibliography}` `:keyprefix:` (a work cited on several pages is listed on each
    # under a per-page key, `ch2-bengio2003`, as sphinxcontrib-bibtex asks): stripped before lookup
    key_prefix: str = ""
    bibliography: list[str] = field(default_factory=list)  # formatted entries cited here
    substitutions: dict[str, str] = field(default_factory=dict)
    format_glue: Callable[[str, str], str] | None = None  # (text/plain, format spec) -> text
    problems: list[str] = field(default_factory=list)  # what could not be resolved
    reading_time: str = ""  # the page's `{reading-time}` (claims.reading_minutes), "about 25 min"
    chapter_reading_time: str = ""  # ``{reading-time}`chapter``: the chapter's pages together
    chapter_runtime: float | None = None  # ``{chapter-runtime}``: seconds, every page's together
    # another page's glue, for ``{glue:text}`page.md::key``` (path relative to `source_dir`):
    # resolved source path -> (glue, glue_markdown, glue_images) as above
    other_glue: dict[Path, tuple[dict, dict, dict]] = field(default_factory=dict)
    # the page's folder: a ``literalinclude`` path is relative to it
    source_dir: Path | None = None


def to_markdown(source: str, resolved: Resolved) -> tuple[str, dict[str, dict[str, str]]]:
    """Plain Markdown for one MyST Markdown cell, and the cell's attachments (name -> {mime: b64})."""
    attachments: dict[str, dict[str, str]] = {}
    lines = _convert_block(source.splitlines(), resolved, attachments)
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text, attachments


# -- blocks -------------------------------------------------------------------------------------


def _convert_block(lines: list[str], res: Resolved, attachments: dict) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if LABEL.match(line):
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            end = _closing_fence(lines, i, fence)
            body = lines[i + 1 : end]
            info = fence["info"].strip()
            directive = DIRECTIVE.match(info)
            indent = fence["indent"]
            if directive:
                out.extend(
                    indent + x
                    for x in _directive(
                        directive["name"].strip(),
                        directive["argument"].strip(),
                        _dedent(body, indent),
                        res,
                        attachments,
                    )
                )
            elif fence["fence"].startswith(":"):  # a colon fence without a directive name
                out.extend(_convert_block(body, res, attachments))
            else:  # an ordinary code block: copied untouched
                out.append(line)
                out.extend(body)
                if end < len(lines):
                    out.append(lines[end])
            i = end + 1
            continue
        if line.strip().startswith("$$"):
            end, block = _math_block(lines, i, res)
            out.extend(block)
            i = end + 1
            continue
        heading = HEADING.match(line)
        if heading:
            number = res.sections.get(_plain(heading["title"]))
            title = _inline(heading["title"], res)
            if number:
                title = f"{number}{'' if '.' in number else '.'} {title}"
            out.append(f"{heading['level']} {title}")
            i += 1
            continue
        out.append(_inline(line, res))
        i += 1
    return out


def _plain(title: str) -> str:
    return " ".join(re.sub(r"[$`*_]", "", title).split())


def _closing_fence(lines: list[str], start: int, opening: re.Match) -> int:
    char, length = opening["fence"][0], len(opening["fence"])
    depth = 0
    for j in range(start + 1, len(lines)):
        m = FENCE.match(lines[j])
        if not m or m["fence"][0] != char:
            continue
        if m["info"].strip() and char == ":":  # a nested colon directive opens
            depth += 1
            continue
        if m["info"].strip() == "" and len(m["fence"]) >= length:
            if depth == 0:
                return j
            depth -= 1
        elif m["info"].strip() and char != ":" and len(m["fence"]) == length:
            continue
    return len(lines)


def _dedent(lines: list[str], indent: str) -> list[str]:
    return [x[len(indent) :] if x.startswith(indent) else x.lstrip() for x in lines]


def _math_block(lines: list[str], start: int, res: Resolved) -> tuple[int, list[str]]:
    """A ``$$ … $$`` block, whose optional ``(label)`` after the closing $$ becomes ``\\tag``."""
    first = lines[start].strip()
    if first.count("$$") >= 2 and len(first) > 4:  # one-line $$ … $$ (label)
        m = MATH_END_LABEL.match(first[2:])
        if m:
            return start, [f"$${m['body']}{_tag(m['label'], res)}$$"]
        return start, [first]
    body: list[str] = [lines[start]]
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        m = MATH_END_LABEL.match(stripped)
        if m:
            if m["body"].strip():
                body.append(m["body"])
            body.append(_tag(m["label"], res).strip())
            body.append("$$")
            return j, body
        if stripped.endswith("$$"):
            body.append(lines[j])
            return j, body
        body.append(lines[j])
    return len(lines) - 1, body


def _tag(label: str, res: Resolved) -> str:
    number = res.equations.get(label.strip())
    if number is None:
        res.problems.append(f"equation label {label!r} has no number")
        return ""
    return f" \\tag{{{number}}}"


def _options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split a directive body into its ``:key: value`` (or YAML ``---``) options and its content."""
    options: dict[str, str] = {}
    if body and body[0].strip() == "---":
        for j in range(1, len(body)):
            if body[j].strip() == "---":
                for line in body[1:j]:
                    key, _, value = line.partition(":")
                    options[key.strip()] = value.strip()
                return options, body[j + 1 :]
    j = 0
    while j < len(body):
        m = re.match(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$", body[j])
        if not m:
            break
        options[m["key"]] = m["value"].strip()
        j += 1
    return options, body[j:]


def _directive(
    name: str, argument: str, body: list[str], res: Resolved, attachments: dict
) -> list[str]:
    options, content = _options(body)
    if name in DROPPED:
        return []
    if name in CODE:
        language = argument.split()[0] if argument else ""
        return [f"```{language}", *content, "```"]
    if name == "literalinclude":
        return _literal_include(argument, options, res)
    if name == "math":
        label = options.get("label")
        tag = _tag(label, res) if label else ""
        return ["$$", *content, tag.strip(), "$$"] if tag else ["$$", *content, "$$"]
    if name == "bibliography":
        if not res.bibliography:
            return []
        if res.cite_style == "label":
            return [f"- {entry}" for entry in res.bibliography]
        return [f"{n}. {entry}" for n, entry in enumerate(res.bibliography, 1)]
    if name in {"glue", "glue:", "glue:any", "glue:figure", "glue:md", "glue:text"}:
        return _glue_block(name, argument, options, content, res, attachments)
    if name in {"figure", "image"}:
        caption = _inline(" ".join(x.strip() for x in content if x.strip()), res)
        number = _numbered(options.get("name", ""), res)
        alt = options.get("alt", caption or argument)
        lines = [f"![{alt}]({argument})"]
        if caption:
            lines += ["", f"**{number}:** {caption}" if number else caption]
        return lines
    if name == "table":
        number = _numbered(options.get("name", ""), res)
        title = _inline(argument, res)
        head = f"**{number}:** {title}" if number and title else f"**{number or title}**"
        return [head, "", *_convert_block(content, res, attachments)]
    if name == "exercise":  # sphinx-exercise: "Exercise 4.1" in bold, then its text and hint
        number = _numbered(options.get("label", ""), res) or "Exercise"
        inner = _convert_block(content, res, attachments)
        while inner and not inner[0].strip():
            inner.pop(0)
        return [f"**{number}.**" + (f" {_inline(argument, res)}" if argument else ""), "", *inner]
    if name in ADMONITIONS or name.startswith(("admonition", "note", "tip", "warning")):
        title = _inline(argument, res) if argument else name.capitalize()
        inner = _convert_block(content, res, attachments)
        while inner and not inner[0].strip():
            inner.pop(0)
        quoted = [f"> **{title}**", ">"] + [f"> {x}" if x.strip() else ">" for x in inner]
        return quoted
    # anything else: its title in bold, then its content
    inner = _convert_block(content, res, attachments)
    return ([f"**{_inline(argument, res)}**", ""] if argument else []) + inner


def _literal_include(argument: str, options: dict[str, str], res: Resolved) -> list[str]:
    """The library code a page shows, read from the same file and object as Sphinx reads it."""
    path = (res.source_dir or Path(".")) / argument
    if not path.is_file():
        res.problems.append(f"literalinclude: no file {argument!r}")
        return []
    if options.get("pyobject"):
        try:
            code = object_lines(path, options["pyobject"])
        except KeyError as error:
            res.problems.append(f"literalinclude: {error.args[0]}")
            return []
    else:
        code = path.read_text(encoding="utf-8").splitlines()
    caption = options.get("caption", "")
    head = [f"*{_inline(caption, res)}*", ""] if caption else []
    return [*head, "```python", *code, "```"]


def _glue_of(reference: str, res: Resolved) -> tuple[dict, dict, dict]:
    """(glue, glue_markdown, glue_images) of the page a glue reference reads: this page's, or for
    ``page.md::key`` that page's (a path relative to this page's folder, as the chapters write it)."""
    if "::" not in reference:
        return res.glue, res.glue_markdown, res.glue_images
    page = reference.split("::", 1)[0].strip()
    found = res.other_glue.get(((res.source_dir or Path()) / page).resolve())
    if found is None:
        res.problems.append(f"glue from {page!r}: no such page of this chapter")
        return {}, {}, {}
    return found


def _glue_block(name, argument, options, content, res, attachments) -> list[str]:
    key = argument.split("::")[-1].strip()
    glue, glue_markdown, glue_images = _glue_of(argument, res)
    lines: list[str] = []
    if key in glue_images:
        mime, data = glue_images[key]
        filename = f"{key}.{mime.split('/')[-1].split('+')[0]}"
        if mime == "image/svg+xml" and data.lstrip().startswith("<"):  # text in outputs;
            data = base64.b64encode(data.encode("utf-8")).decode("ascii")  # base64 in attachments
        attachments[filename] = {mime: data}
        alt = _inline(options.get("alt", key), res).replace("[", "(").replace("]", ")")
        lines.append(f"![{alt}](attachment:{filename})")
    elif key in glue_markdown:
        lines.append(glue_markdown[key])
    elif key in glue:
        lines.append(glue[key])
    else:
        res.problems.append(f"glue key {key!r} has no value")
    caption = _inline(" ".join(x.strip() for x in content if x.strip()), res)
    if caption:
        number = _numbered(options.get("name", ""), res)
        lines += ["", f"**{number}:** {caption}" if number else caption]
    return lines


def _numbered(label: str, res: Resolved) -> str:
    if not label or label not in res.numbers:
        return ""
    figtype, number = res.numbers[label]
    return res.numfig_format.get(figtype, "%s").replace("%s", number)


# -- inline -------------------------------------------------------------------------------------


def _inline(text: str, res: Resolved) -> str:
    """Replace every role in `text` by its resolved text; inline code spans are left alone."""

    def replace(m: re.Match) -> str:
        if m["code"] is not None:
            return m["code"]
        return _role(m["name"], m["content"], res)

    text = ROLE_OR_CODE.sub(replace, text)
    for key, value in res.substitutions.items():
        text = re.sub(r"\{\{\s*" + re.escape(key) + r"\s*\}\}", value, text)
    return text


def _title_target(content: str) -> tuple[str | None, str]:
    m = TITLE_TARGET.match(content.strip())
    if m:
        return m["title"].strip(), m["target"].strip()
    return None, content.strip()


def _role(name: str, content: str, res: Resolved) -> str:
    if name.startswith("glue"):
        return _glue_text(name, content, res)
    if name.startswith("cite"):
        return _cite(name, content, res)
    title, target = _title_target(content)
    if name == "eq":
        if title:
            return title
        number = res.equations.get(target)
        if number is None:
            res.problems.append(f"equation {target!r} has no number")
            return target
        return res.eqref_format.format(number=number)
    if name == "numref":
        if target not in res.numbers:
            res.problems.append(f"numref target {target!r} has no number")
            return title or target
        figtype, number = res.numbers[target]
        if title:
            return title.replace("%s", number).replace("{number}", number)
        return res.numfig_format.get(figtype, "%s").replace("%s", number)
    if name == "ref":
        if title:
            return title
        if target not in res.labels:
            res.problems.append(f"ref target {target!r} has no title")
            return target
        number = res.sections.get(target) or res.sections.get(_plain(res.labels[target]))
        return f"*{res.labels[target]}* (Section {number})" if number else res.labels[target]
    if name == "doc":
        if title:
            return title
        docname = target.lstrip("/").removesuffix(".md")
        return res.docs.get(docname) or res.docs.get(docname.split("/")[-1], target)
    if name == "const":  # a declared constant (claims.py): its text as written
        return content
    if name == "reading-time":
        found = res.chapter_reading_time if content.strip() == "chapter" else res.reading_time
        if not found:
            res.problems.append(f"the reading time ({content}) was not computed")
        return found
    if name == "chapter-runtime":
        if res.chapter_runtime is None:
            res.problems.append("the chapter's running time was not computed")
            return "?"
        value = str(res.chapter_runtime)
        return (
            res.format_glue(value, content.strip())
            if res.format_glue and content.strip()
            else value
        )
    if name == "math":
        return f"${content}$"
    if name in {"sub", "subscript"}:
        return f"<sub>{content}</sub>"
    if name in {"sup", "superscript"}:
        return f"<sup>{content}</sup>"
    if name == "kbd":
        return f"<kbd>{content}</kbd>"
    if name in {"code", "literal", "file", "samp", "command", "program", "envvar"}:
        return f"`{content}`"
    return title if title is not None else target  # download, term, abbr, …


def _glue_text(name: str, content: str, res: Resolved) -> str:
    key, spec = content, ""
    if name == "glue:text" and ":" in content.split("::")[-1]:
        key, spec = content.rsplit(":", 1)
    glue, glue_markdown, _ = _glue_of(key, res)
    key = key.split("::")[-1].strip()
    if name == "glue:md" and key in glue_markdown:
        return glue_markdown[key].strip()
    if key not in glue:
        res.problems.append(f"glue key {key!r} has no value")
        return f"[{key}]"
    value = glue[key]
    if res.format_glue is not None:  # with no spec too: a glued string loses its repr's quotes
        value = res.format_glue(value, spec)
    # Markdown cells render raw HTML: a glued "</s>" would vanish as a tag, so escape it as the
    # page does
    return html.escape(value, quote=False)


def _cite(name: str, content: str, res: Resolved) -> str:
    keys = [k.strip() for k in content.split(",") if k.strip()]
    keys = [k.removeprefix(res.key_prefix) if res.key_prefix else k for k in keys]
    found = []
    for key in keys:
        if key not in res.citations:
            res.problems.append(f"citation {key!r} is not in the bibliography")
            found.append((key, "n.d.", key))
        else:
            authors, year, *label = res.citations[key]
            found.append((authors, year, label[0] if label else key))
    style = name.partition(":")[2]
    if res.cite_style == "label":  # as the page: [BDVJ03], and "Bengio et al. [BDVJ03]"
        if style in {"t", "ts", "alt"}:
            return "; ".join(f"{a} [{label}]" for a, _, label in found)
        if style in {"author", "authors"}:
            return "; ".join(a for a, _, _ in found)
        return "[" + ", ".join(label for _, _, label in found) + "]"
    if style in {"t", "ts", "alt"}:
        return "; ".join(f"{a} ({y})" for a, y, _ in found)
    if style in {"author", "authors"}:
        return "; ".join(a for a, _, _ in found)
    if style == "year":
        return "; ".join(y for _, y, _ in found)
    if style in {"alp", "alps"}:
        return "; ".join(f"{a}, {y}" for a, y, _ in found)
    return "(" + "; ".join(f"{a}, {y}" for a, y, _ in found) + ")"  # cite, cite:p, cite:ps
