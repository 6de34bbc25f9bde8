"""The documentation site builds clean: ``mkdocs build --strict`` (every warning an error).

The site (``mkdocs.yml``) is the user's guide, every page of docs/, and the API reference
from the docstrings (docs/api/).  The build fails on a broken link or anchor, a docstring
griffe cannot parse, an object the reference names that no longer exists, and a docs/*.md
page missing from the nav.  It needs the ``docs`` extra (``pip install -e '.[docs]'``); without
it the build is skipped with a message that says so.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"

#: Seconds the build may take (about 10 s; the limit leaves room for a loaded machine).
TIMEOUT = 120

#: What the build imports, and the distribution that installs it (all in the docs extra).
_NEEDS = {
    "mkdocs": "mkdocs",
    "material": "mkdocs-material",
    "mkdocstrings": "mkdocstrings",
    "mkdocstrings_handlers": "mkdocstrings-python",
}
_MISSING = [dist for module, dist in _NEEDS.items() if importlib.util.find_spec(module) is None]
needs_mkdocs = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"the documentation site needs {', '.join(_MISSING)}: pip install -e '.[docs]'",
)


def _load(name: str, path: Path):
    """Import a helper of the site from tools/ (not a package) by its path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages() -> list[str]:
    """Every page the nav of mkdocs.yml lists (its YAML's ``!!python`` tags left unread)."""
    yaml = pytest.importorskip("yaml", reason="reading mkdocs.yml needs PyYAML (docs extra)")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load(CONFIG.read_text(encoding="utf-8"), Loader=Loader)

    def pages(entry) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [page for item in entry for page in pages(item)]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in pages(value)]
        return []

    return pages(config["nav"])


def test_every_docs_page_is_in_the_nav():
    """A new docs/*.md page must be added to the nav of mkdocs.yml, or it is not on the site."""
    nav = _nav_pages()
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    missing = sorted(on_disk - set(nav))
    assert not missing, f"add these pages to `nav:` in mkdocs.yml: {missing}"
    gone = sorted(set(nav) - on_disk)
    assert not gone, f"mkdocs.yml's nav lists pages that are not in docs/: {gone}"
    assert len(nav) == len(set(nav)), "mkdocs.yml's nav lists a page twice"


def _architecture_sections() -> list[tuple[str, str]]:
    """``(package, body)`` of each section of docs/architecture.md that names a package."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    out = []
    for section in sections:
        heading, _, body = section.partition("\n")
        named = re.findall(r"`([\w.]+)`", heading)
        if named:
            out.append((named[-1], body.split("\n## ", 1)[0]))
    return out


def test_architecture_names_modules_that_exist():
    """Every module docs/architecture.md names (``env.py``, ``warm_start*.py``, ``logs/``) is
    in the package its section is about: a renamed or moved module must be renamed there."""
    sections = _architecture_sections()
    assert {package for package, _ in sections} >= {
        "lrbandit_gym",
        "agents",
        "inference",
        "lrbandit_gym.experiments",
    }
    for package, body in sections:
        folder = ROOT.joinpath(*package.split("."))
        assert folder.is_dir(), f"docs/architecture.md describes {package}, which is not there"
        for name in re.findall(r"`([\w*]+\.py|\w+/)`", body):
            assert list(folder.glob(name.rstrip("/"))), (
                f"docs/architecture.md names {name} in {package}, which has no such module"
            )


def test_links_leaving_docs_are_checked_and_rewritten(tmp_path, caplog):
    """The hook for links from docs/ to the repository: an existing file becomes its text (or
    a link to repo_url); a missing one, or one outside the repository, is a build warning."""
    hooks = _load("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# r\n", encoding="utf-8")
    page = (
        "[the README](../README.md#two-commands), [a page](other.md#x), [web](https://a.b/c)\n"
        "```\n[in code](../README.md)\n```\n"
    )
    with caplog.at_level(logging.WARNING):
        assert hooks.rewrite(page, "index.md", docs, None) == (
            "the README, [a page](other.md#x), [web](https://a.b/c)\n"
            "```\n[in code](../README.md)\n```\n"
        )
        assert hooks.rewrite("[r](../../README.md)", "api/x.md", docs, "https://h/o/r/") == (
            "[r](https://h/o/r/blob/HEAD/README.md)"
        )
        assert not caplog.records
        for link in ("../MISSING.md", "../../elsewhere.md"):
            assert hooks.rewrite(f"[x]({link})", "index.md", docs, None) == f"[x]({link})"
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert "does not exist" in caplog.records[0].getMessage()
    assert "outside the repository" in caplog.records[1].getMessage()


def test_sphinx_roles_become_inline_code():
    pytest.importorskip("griffe", reason="the docstring extension needs griffe (docs extra)")
    roles = _load("griffe_roles", ROOT / "tools" / "griffe_roles.py")
    text = "See :class:`~agents.LowRankSGD`, :meth:`interval` and :mod:`inference.wrappers`."
    assert roles.code_for_roles(text) == "See `LowRankSGD`, `interval` and `inference.wrappers`."


@needs_mkdocs
def test_site_builds_clean(tmp_path):
    """``mkdocs build --strict`` succeeds, and the pages it must have are there."""
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"mkdocs build took more than {TIMEOUT} s", pytrace=False)
    if result.returncode != 0:
        problems = [
            line
            for line in result.stderr.splitlines()
            if line.startswith(("WARNING", "ERROR", "  - "))  # "  - " lists omitted pages
        ]
        pytest.fail(
            "mkdocs build --strict failed:\n"
            + "\n".join(problems or result.stderr.splitlines()[-40:]),
            pytrace=False,
        )
    pages = {p.relative_to(DOCS).with_suffix(".html").as_posix() for p in DOCS.rglob("*.md")}
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert pages <= built, f"pages missing from the site: {sorted(pages - built)}"
    # The API reference was rendered from the docstrings, not left as `:::` lines.
    for page, anchor in (
        ("api/env.html", "lrbandit_gym.env.MatrixContextBanditEnv"),
        ("api/agents.html", "agents.EpsilonGreedy"),
        ("api/inference.html", "inference.ParameterInference"),
    ):
        html = (site / page).read_text(encoding="utf-8")
        assert f'id="{anchor}"' in html, f"{page} does not document {anchor}"
        assert ":::" not in html, f"{page} has an unrendered ::: block"
