"""The book's pages, from _toc.yml: the site tests and the link tests check every one of them."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def toc_pages() -> list[str]:
    """The book's pages in reading order, as site paths (``book/ch03_rnn.html``), from _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [f"{page}.html" for page in pages]
