"""MkDocs hook for the documentation site: links from docs/ to files outside it.

The pages of docs/ are read on the repository host as well as on the site, so they link to
files beside docs/ (``../README.md#two-commands``, ``../examples/compare_agents.py``).  Those
files are not pages of the site, and MkDocs can only report such a link as not found.  This
hook (``hooks:`` in ``mkdocs.yml``) handles exactly these links, before MkDocs validates the
rest:

- a link that leaves docs/ must name a file that exists in the repository, or the build warns
  (an error under ``--strict``);
- it then points at the file on the repository host when ``repo_url`` is set
  (``{repo_url}/blob/HEAD/{path}``), and otherwise becomes its plain text.

Every other link is left to MkDocs' own validation (``validation:`` in ``mkdocs.yml``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PurePosixPath

log = logging.getLogger("mkdocs.hooks.outside_docs")

#: An inline Markdown link ``[text](target)`` (images excluded), and a code fence.
LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def outside_target(target: str, page_src: str, docs_dir: Path) -> PurePosixPath | None:
    """The repository path a relative link leads to when it leaves docs/; None otherwise."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    resolved = (docs_dir / PurePosixPath(page_src).parent / path).resolve()
    if resolved.is_relative_to(docs_dir.resolve()):
        return None
    return PurePosixPath(resolved.relative_to(docs_dir.resolve().parent).as_posix())


def rewrite(markdown: str, page_src: str, docs_dir: Path, repo_url: str | None) -> str:
    """``markdown`` with its links outside docs/ checked and rewritten (see the module)."""
    root = docs_dir.resolve().parent

    def one(match: re.Match) -> str:
        text, target = match.groups()
        try:
            path = outside_target(target, page_src, docs_dir)
        except ValueError:  # above the repository: no such file in it
            log.warning(f"Doc file '{page_src}' links to '{target}', outside the repository")
            return match.group(0)
        if path is None:
            return match.group(0)
        if not (root / path).exists():
            log.warning(f"Doc file '{page_src}' links to '{target}', which does not exist")
            return match.group(0)
        if repo_url:
            anchor = target[len(target.split("#", 1)[0]) :]
            return f"[{text}]({repo_url.rstrip('/')}/blob/HEAD/{path}{anchor})"
        return text

    pieces, end = [], 0
    for fence in FENCE.finditer(markdown):
        pieces += [LINK.sub(one, markdown[end : fence.start()]), fence.group(0)]
        end = fence.end()
    pieces.append(LINK.sub(one, markdown[end:]))
    return "".join(pieces)


def on_page_markdown(markdown, page, config, files):
    return rewrite(markdown, page.file.src_uri, Path(config["docs_dir"]), config.get("repo_url"))
