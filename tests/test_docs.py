"""The README and the documentation pages: a README read in minutes, and no link that
leads nowhere (a page or figure moved without its links is caught here)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = ("published-leaderboard.md",)  # made by tools/mkdocs_hooks.py as the site builds


def test_the_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_of_a_page_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not links
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in local if not (page.parent / t).exists() and t not in GENERATED]
    assert not missing, missing
    if page.name == "README.md":
        assert local  # not vacuous: the README links into the docs


@pytest.mark.slow  # the whole site, the report site's pages and figures among it
def test_the_site_builds_with_no_warning_and_holds_the_readme_and_the_api(tmp_path):
    """`mkdocs build --strict` (a broken link, a missing page or a docstring griffe cannot
    read fails it): the home page is the README, the API reference has the run path."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    site = tmp_path / "site"
    # Not -q: it silences the warnings that --strict counts, and the build passes.
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stderr
    home = (site / "index.html").read_text()
    assert "The agent contract" in home and "ensemble+" in home
    assert "run_agent" in (site / "api" / "index.html").read_text()
    for page in ("getting-started", "writing-an-agent", "concepts", "leaderboard"):
        assert (site / page / "index.html").exists(), page
    from neural_testbed.agents import registry

    for name in registry.AGENTS:  # a page per agent, made from the registry at build time
        assert "Published scores" in (site / "agents" / name / "index.html").read_text(), name
    speed = (site / "speed" / "index.html").read_text()  # the results files, as tables
    assert "Latest measurements" in speed and "program_costs.py" in speed
    mlp = (site / "agents" / "mlp" / "index.html").read_text()
    assert "210 of 210" in mlp and "170 of 170" in mlp  # its paper and real rows
    assert "Adam step size" in mlp  # its config fields, with what each is
    board = (site / "published-leaderboard" / "index.html").read_text()  # from the table
    assert "published-site/index.html" in board and "sgmcmc" in board
    assert "sgmcmc [published]" in (site / "published-site" / "index.html").read_text()


@pytest.mark.slow  # the quick sweep, as the README runs it
def test_the_readmes_python_quickstart_runs_as_written(capsys, monkeypatch, short_training):
    short_training(monkeypatch)  # 18 problems; what is checked is the lines, not the numbers
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (code,) = [b for b in blocks if "run_agent" in b]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_quickstart"})
    problem_id, tau, kl = capsys.readouterr().out.split()
    assert problem_id.startswith("classification_2d/") and tau == "1" and float(kl) > 0
