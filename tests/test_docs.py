"""The README and the documentation pages: a README read in minutes, and no link that
leads nowhere (a page or figure moved without its links is caught here)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_of_a_page_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not links
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in local if not (page.parent / t).exists()]
    assert not missing, missing
    if page.name == "README.md":
        assert local  # not vacuous: the README links into the docs
