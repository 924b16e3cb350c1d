// Search results with readable snippets, from a web server or opened from disk (file://).
//
// Sphinx's search page fetch()es every matching page to cut a snippet from its text: from disk
// the browser refuses ("Failed to fetch"), and over HTTP the text still holds the raw LaTeX that
// MathJax has not typeset in a fetched page. The build writes the pages' text, with math turned into
// plain symbols, to _static/search-text.js (window.SEQMODELS_SEARCH_TEXT); this script turns Sphinx's
// fetch off and adds the snippet to each result from there.
"use strict";
(() => {
  if (typeof DOCUMENTATION_OPTIONS === "undefined") return;
  DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;

  const terms = () =>
    (new URLSearchParams(window.location.search).get("q") || "")
      .toLowerCase()
      .split(/\s+/)
      .filter((t) => t.length > 0);

  const highlighted = (text, words) => {
    const p = document.createElement("p");
    p.className = "context";
    const lower = text.toLowerCase();
    let at = 0;
    while (at < text.length) {
      let next = -1;
      let word = "";
      for (const w of words) {
        const i = lower.indexOf(w, at);
        if (i > -1 && (next === -1 || i < next)) [next, word] = [i, w];
      }
      if (next === -1) break;
      p.appendChild(document.createTextNode(text.slice(at, next)));
      const span = document.createElement("span");
      span.className = "highlighted";
      span.textContent = text.slice(next, next + word.length);
      p.appendChild(span);
      at = next + word.length;
    }
    p.appendChild(document.createTextNode(text.slice(at)));
    return p;
  };

  const addSnippet = (item) => {
    if (item.dataset.snippet) return;
    item.dataset.snippet = "done";
    const link = item.querySelector("a");
    const texts = window.SEQMODELS_SEARCH_TEXT || {};
    if (!link) return;
    const [path, anchor] = link.getAttribute("href").split("#");
    const page = texts[path.replace(/\.html$/, "")];
    if (!page) return;
    let text = page.text;
    if (anchor && page.sections[anchor]) text = text.slice(...page.sections[anchor]);
    const words = terms();
    const lower = text.toLowerCase();
    const found = words.map((w) => lower.indexOf(w)).filter((i) => i > -1);
    const start = Math.max((found.length ? Math.min(...found) : 0) - 120, 0);
    const snippet =
      (start > 0 ? "…" : "") + text.substr(start, 240).trim() + (start + 240 < text.length ? "…" : "");
    item.appendChild(highlighted(snippet, words));
  };

  const observer = new MutationObserver(() =>
    document.querySelectorAll("#search-results li").forEach(addSnippet)
  );
  const start = () => observer.observe(document.body, { childList: true, subtree: true });
  if (document.body) start();
  else document.addEventListener("DOMContentLoaded", start);
})();
