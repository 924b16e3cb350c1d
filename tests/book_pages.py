"""The book's pages, from _toc.yml: the site tests and the link tests check every one of them."""

import contextlib
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


def chapter_html() -> dict[str, tuple[str, ...]]:
    """``{chapter's landing page: (landing, subpage, …)}`` as site paths, from _toc.yml
    (`book/_ext/chapters.py`)."""
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from chapters import chapter_pages

    return {
        f"{landing}.html": tuple(f"{page}.html" for page in pages)
        for landing, pages in chapter_pages(ROOT).items()
    }


@contextlib.contextmanager
def site_server(site: Path):
    """Serve the built site in `site` on a free port of 127.0.0.1; yields its base address."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
