"""The static leaderboard site (`neural-testbed report`): significance groups against known
answers and against `compare`, pages that hold the scoring's numbers, links and figures
that resolve, bad input, and the site in a real browser."""

from __future__ import annotations

import dataclasses
import html.parser
import importlib.util
import os
import pathlib
import shutil

import numpy as np
import pytest

from neural_testbed import agents, cli, leaderboard, site
from neural_testbed.leaderboard import baselines, model_costs, scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

# Two settings of the paper sweep (temperature 0.1; T = 10 and 100), ten seeds each.
PROBLEMS = {pid: p for pid, p in leaderboard.get_sweep("paper").items()
            if p.temperature == 0.1 and p.num_train in (10, 100)}
# Per-problem KL at tau = 1 (tau = 100 is 60 times it): a shared difficulty, and per
# agent an offset and its own noise. ``close`` differs from ``best`` by noise whose mean
# is 0.002 against a paired standard error of about 0.003 (not significant); ``far`` is
# 0.2 worse, many standard errors.
LEVELS = {"best": (0.0, 0.01), "close": (0.002, 0.01), "far": (0.2, 0.01)}


@dataclasses.dataclass(frozen=True)
class _Config:
    name: str


def _rows(levels=LEVELS) -> list[store_lib.StoredRow]:
    rng = np.random.default_rng(0)
    difficulty = {pid: 0.1 + 0.05 * rng.random() for pid in PROBLEMS}
    rows = []
    for agent, (offset, noise) in levels.items():
        config = _Config(agent)
        for pid, problem in PROBLEMS.items():
            kl = difficulty[pid] + offset + noise * rng.standard_normal()
            for tau in problem.taus:
                row = run_rows.result_row(
                    agent, store_lib.config_hash(agent, config), store_lib.config_json(config), problem,
                    tau, "auto", 0, estimate=kl * (1 if tau == 1 else 60),
                    estimate_stderr=0.001, num_clipped=0, accuracy=0.8, ece=0.05,
                    train_seconds={"best": 2.0, "close": 0.5, "far": 0.1}[agent],
                    compile_seconds=0.1, eval_seconds=0.25)
                rows.append(store_lib.StoredRow(**row.as_dict(), version="0.1.0",
                                                timestamp="t"))
    return rows


def test_agents_the_paired_test_cannot_tell_from_the_best_share_its_group():
    groups = scoring.significance_groups(_rows(), PROBLEMS)
    assert groups == {"best": {1: 1, 100: 1}, "close": {1: 1, 100: 1},
                      "far": {1: 2, 100: 2}}


def test_significance_groups_agree_with_compare_on_the_same_pairs():
    """Whoever shares the leader's group is not `worse` than it in compare's pooled test at
    that tau, and whoever does not is."""
    rows = _rows()
    groups = scoring.significance_groups(rows, PROBLEMS)
    records, _ = scoring.score_agents(rows, PROBLEMS, baseline="best")
    for tau in (1, 100):
        leader = min(records, key=lambda r: r[f"kl_{tau}"])["agent"]
        for agent in ("best", "close", "far"):
            if agent == leader:
                continue
            pooled = next(r for r in scoring.compare_agents(rows, PROBLEMS, agent, [leader])
                          if r["scope"] == "pooled" and r["tau"] == tau)
            assert (groups[agent][tau] == groups[leader][tau]) == (
                pooled["verdict"] != "worse"), (agent, tau, pooled)


class _Page(html.parser.HTMLParser):
    """Links, images and the text of each table row of an HTML page."""

    def __init__(self, text: str):
        super().__init__()
        self.links, self.images, self.rows, self._row, self._cell = [], [], [], None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A site of the hand-made rows alone (no published rows), and its board."""
    out = tmp_path_factory.mktemp("site")
    board = site.board(_rows(), "paper", PROBLEMS, (), baselines.load())
    return out, board, site.write_site(out, [board])


def test_the_leaderboard_page_holds_the_scorings_numbers_in_rank_order(written):
    out, board, _ = written
    page = _Page((out / "index.html").read_text())
    header, *body = [r for r in page.rows if len(r) > 10]
    assert header[:3] == ["group (tau 1/100)", "agent", "source"]
    assert [r[1] for r in body] == [r["label"] for r in board.records]
    for shown, record in zip(body, board.records):
        cells = dict(zip(header, shown))
        for tau in (1, 100):
            assert cells[f"kl_{tau}"] == scoring.plus_minus(record[f"kl_{tau}"],
                                                            record[f"kl_{tau}_stderr"])
        assert cells["group (tau 1/100)"] == "/".join(
            str(board.groups[record["agent"]][t]) for t in (1, 100))
        assert cells["problems"] == "20 of 20"
        assert cells["computed on"] == "(a)"  # this store's rows, the one place named
    best = dict(zip(header, body[[r["agent"] for r in board.records].index("best")]))
    # Its config trains in 2 s and evaluates each of two taus in 0.25 s, per problem.
    assert (best["train s/problem"], best["eval s/problem"]) == ("2", "0.5")


def test_every_link_and_figure_of_the_site_resolves(written):
    out, _, files = written
    pages = sorted(out.glob("*.html"))
    assert {p.name for p in pages} >= {"index.html", "agent-best.html", "agent-far.html"}
    assert set(files) >= set(pages)
    images = []
    for page in pages:
        parsed = _Page(page.read_text())
        for link in parsed.links:
            target = link.split("#")[0]
            assert target == "" or (out / target).is_file(), (page.name, link)
        images += parsed.images
    if importlib.util.find_spec("matplotlib"):  # the figures are drawn
        assert images
        for image in images:
            assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
            assert (out / image).with_suffix(".pdf").is_file()


def test_an_agents_page_has_its_config_its_settings_and_a_paired_comparison(written):
    out, board, _ = written
    text = (out / "agent-close.html").read_text()
    assert "&quot;name&quot;: &quot;close&quot;" in text  # the config, as JSON
    page = _Page(text)
    header, *settings = [r for r in page.rows if len(r) == 5]
    assert header == ["temperature", "num_train", "kl_1", "kl_100", "problems"]
    assert [r[:2] for r in settings] == [["0.1", "10"], ["0.1", "100"]]
    shown = {(float(r[0]), int(r[1])): r[2:4] for r in settings}
    for record in [r for r in board.by_setting if r["agent"] == "close"]:
        assert shown[record["temperature"], record["num_train"]][record["tau"] != 1] == (
            scoring.plus_minus(record["kl"], record["kl_stderr"]))
    assert text.count("<svg") == 2  # loss against T, at each tau
    point = next(r for r in board.by_setting if r["agent"] == "close" and r["tau"] == 100
                 and r["num_train"] == 10)
    assert (f"<title>close, temperature 0.1 (medium SNR), T = 10: "
            f"{scoring.plus_minus(point['kl'], point['kl_stderr'])}</title>") in text
    compare = site.compare_page("close", "best", "paper")
    assert compare in page.links
    pooled = next(r for r in scoring.compare_agents(board.rows, PROBLEMS, "close", ["best"])
                  if r["scope"] == "pooled" and r["tau"] == 1)
    rows = _Page((out / compare).read_text()).rows
    assert any(r[0] == "pooled" and scoring.plus_minus(pooled["kl_diff"], pooled["stderr"])
               in r for r in rows)


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_report_writes_the_published_leaderboard_without_a_store(tmp_path, capsys):
    assert cli.main(["report", "--out", str(tmp_path / "site"), "--sweep", "paper"]) == 0
    assert "wrote" in capsys.readouterr().out
    page = _Page((tmp_path / "site" / "index.html").read_text())
    agents = {r[1] for r in page.rows if len(r) > 10} - {"agent"}
    published = {p["agent"] for p in baselines.load().progress
                 if p["sweep"] == "paper" and p["problems"]}
    assert agents == {f"{a} [published]" for a in published}
    header = next(r for r in page.rows if r[1:2] == ["agent"])
    mlp = dict(zip(header, next(r for r in page.rows if r[1] == "mlp [published]")))
    assert (mlp["state floats"], mlp["FLOPs/input"]) == (  # mlp (50, 50) at d = 2, K = 2
        "2,802", scoring.format_cell(model_costs.model_cost(
            "mlp", leaderboard.get_sweep("paper")["classification_2d/69"]  # the largest, T = 1000
        ).flops_per_input))


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "nope"], "--sweep 'nope': no such sweep"),
    (["--db", "missing.db"], "--db 'missing.db': no results store there"),
    (["--sweep", "smoke", "--compare", "mlp", "nope"],
     "--compare 'nope': no results for that agent on smoke"),
])
def test_bad_input_is_one_line_before_any_page(tmp_path, monkeypatch, argv, message,
                                               one_error_line):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--out", "site", *argv]) == 2
    one_error_line(message)
    assert not (tmp_path / "site").exists()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
@pytest.mark.skipif(_chromium() is None, reason="no chromium (Debian's package `chromium`; "
                                                ".ci/run installs it)")
def test_the_site_in_a_browser_sorts_filters_and_shows_its_figures(written, tmp_path):
    """Headless Chromium opens the page from disk; the screenshot goes to
    $NEURAL_TESTBED_SCREENSHOTS (default: the test's own folder)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    out, board, _ = written
    shots = pathlib.Path(os.environ.get("NEURAL_TESTBED_SCREENSHOTS", tmp_path))
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto((out / "index.html").as_uri())
            table = page.locator("#board-paper")
            names = lambda: [r.locator("td").nth(1).inner_text()
                             for r in table.locator("tbody tr").all()]
            assert names() == [r["label"] for r in board.records]  # rank order
            first = table.locator("tbody tr").first.locator("td")
            assert first.nth(3).inner_text() == scoring.plus_minus(  # kl_1, as scored
                board.records[0]["kl_1"], board.records[0]["kl_1_stderr"])
            train = table.locator("th").nth(11)
            assert train.inner_text() == "train s/problem"
            train.locator("button").click()  # fastest first: far 0.1, close 0.5, best 2
            assert names() == ["far", "close", "best"]
            train.locator("button").click()
            assert names() == ["best", "close", "far"]
            page.fill("input.filter", "clo")
            visible = [r for r in table.locator("tbody tr").all() if r.is_visible()]
            assert [r.locator("td").nth(1).inner_text() for r in visible] == ["close"]
            page.fill("input.filter", "")
            loaded = page.eval_on_selector_all(
                "img", "images => images.map(i => i.complete && i.naturalWidth > 0)")
            assert all(loaded), loaded
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "report-index.png"), full_page=True)
            plain = browser.new_context(java_script_enabled=False).new_page()
            plain.goto((out / "index.html").as_uri())  # scripts off: the table, ranked
            assert [r.locator("td").nth(1).inner_text() for r in
                    plain.locator("#board-paper tbody tr").all()] == [
                        r["label"] for r in board.records]
            assert not plain.locator("input.filter").is_visible()  # no filter that can't work
        finally:
            browser.close()
    assert (shots / "report-index.png").stat().st_size > 10_000


def test_published_rows_say_where_their_part_of_the_table_was_computed():
    """Each published row by its (agent, sweep) part's record; a store's rows as local."""
    published = baselines.Published(
        version="v", computed="somewhere", rows=(), definitions={},
        progress=({"agent": "best", "sweep": "paper", "problems": 20, "of": 20,
                   "computed": "on a 2-core x86_64 CPU"},),
        sweeps={"paper": frozenset(PROBLEMS)})
    rows = _rows()
    mixed = [dataclasses.replace(r, source="published") if r.agent == "best" else r
             for r in rows]
    assert baselines.computed_on(published, mixed) == {
        "best": "on a 2-core x86_64 CPU", "close": baselines.LOCAL, "far": baselines.LOCAL}


def test_an_agents_tuned_config_is_its_page_and_its_default_only_a_row_beside_it(tmp_path):
    """mlp with two configs, the default the worse: the index shows both rows, the agent's
    page and the frontier take the tuned one."""
    spec = agents.get_agent("mlp")
    tuned = dataclasses.replace(spec.default, l2_weight_decay=0.1)
    rows = []
    for config, kl in ((spec.default, 0.5), (tuned, 0.1)):
        for pid, problem in PROBLEMS.items():
            for tau in problem.taus:
                row = run_rows.result_row(
                    "mlp", store_lib.config_hash("mlp", config), store_lib.config_json(config),
                    problem, tau, "auto", 0, estimate=kl * tau, estimate_stderr=0.001,
                    num_clipped=0, accuracy=0.8, ece=0.05, train_seconds=1.0,
                    compile_seconds=0.1, eval_seconds=0.25)
                rows.append(store_lib.StoredRow(**row.as_dict(), version="0.1.0",
                                                timestamp="t"))
    board = site.board(rows, "paper", PROBLEMS, (), baselines.load())
    assert [(r["label"], r["extra_default"]) for r in board.records] == [
        ("mlp", False), ("mlp (default)", True)]
    site.write_site(tmp_path, [board])
    page = (tmp_path / site.agent_page("mlp")).read_text()
    assert "rank 1 of 2" in page and "&quot;l2_weight_decay&quot;: 0.1" in page
