"""The static leaderboard site that `neural-testbed report --out DIR` writes.

Benchmarks are read as pages, not terminal tables: this turns stored rows (a store's,
the published ones, or both) into plain HTML files that open from disk and work on any
static host. Every number comes from :mod:`neural_testbed.leaderboard.scoring` (the
leaderboard, its significance groups and ``compare``'s paired tests), so a page says
what the command line says. The tables are in rank order and readable with scripts
off; a short script adds sorting by any column and a filter. Figures (the paper's
Figure 2 and the quality-against-cost frontier) need matplotlib; without it the pages
say so and carry the tables alone.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import pathlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from neural_testbed import base, outputs
from neural_testbed.agents import registry
from neural_testbed.leaderboard import baselines, counted, model_costs, panels, scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.leaderboard.notes import Note

__all__ = ["Board", "agent_page", "board", "compare_page", "write_site"]

@dataclasses.dataclass(frozen=True)
class Board:
    """One sweep's leaderboard as the site shows it."""

    sweep: str
    problems: Mapping[str, Any]
    rows: Sequence[store_lib.StoredRow]  # the rows that count, each with its source
    records: Sequence[dict[str, Any]]  # scoring.score_agents, ranked
    groups: Mapping[str, Mapping[int, int]]  # agent -> tau -> significance group
    by_setting: Sequence[dict[str, Any]]  # scoring.kl_by_setting
    normaliser: str
    devices: Mapping[str, str]  # agent -> where its rows were computed
    notes: Sequence[str]
    times: Mapping[tuple[str, str], tuple[float, float]] = dataclasses.field(
        default_factory=dict)  # (agent, config hash) -> train, eval seconds per problem
    largest: str = ""  # the problem the model costs are of (the sweep's largest)
    costs: Mapping[str, model_costs.ModelCost | None] = dataclasses.field(
        default_factory=dict)  # registered agent -> its default config's cost there

    @property
    def taus(self) -> list[int]:
        return sorted({t for p in self.problems.values() for t in p.taus})

    @property
    def metric(self) -> str:
        return self.records[0]["metric"]


def board(rows: Sequence[store_lib.StoredRow], sweep: str, problems: Mapping[str, Any],
          published_agents: Sequence[str] | None,
          published: baselines.Published | None = None) -> Board:
    """The leaderboard of ``sweep`` from a store's ``rows`` and the published rows of
    ``published_agents`` (None: every published agent the store has no rows of)."""
    published = baselines.load() if published is None else published
    counted_rows, notes = counted.counted_rows(rows, problems, published_agents, published)
    if not rows:  # no store: nothing is filled in, every row is the table's
        where = published.describe({r.agent for r in counted_rows}, problems)
        notes = [Note(f"every row is from the published table: {where}",
                      "every row is from the published table")]
    normaliser = scoring.default_normaliser(problems)
    records, warnings = scoring.score_agents(counted_rows, problems, baseline=normaliser)
    if not records:
        raise ValueError(f"no successful results for the {sweep!r} sweep")
    largest = max(problems.values(), key=lambda p: (p.num_train, base.Shapes.of(p).input_dim,
                                                    p.problem_id))
    costs = {}
    for agent in sorted({r["agent"] for r in records} & set(registry.AGENTS)):
        try:
            costs[agent] = model_costs.model_cost(agent, largest)
        except Exception as error:  # an agent's own error: said, and the others measured
            costs[agent] = None
            warnings.append(f"{agent}'s state size and FLOPs not measured: "
                            f"{type(error).__name__}: {error}")
    return Board(sweep, problems, counted_rows, records,
                 scoring.significance_groups(counted_rows, problems),
                 scoring.kl_by_setting(counted_rows, problems), normaliser,
                 baselines.computed_on(published, counted_rows), [*notes, *warnings],
                 _times(counted_rows, records), largest.problem_id, costs)


def _times(rows: Iterable[store_lib.StoredRow], records: Sequence[Mapping[str, Any]],
           ) -> dict[tuple[str, str], tuple[float, float]]:
    """Mean train and evaluation seconds per problem of each record's config: a problem's
    training once (every tau's row carries it), its evaluations at every tau added."""
    wanted = {(r["agent"], h): (r["agent"], r["config_hash"]) for r in records
              for h in str(r["config_hash"]).split(",")}  # per-setting: several hashes
    train: dict[tuple, dict[str, float]] = {}
    evaluate: dict[tuple, dict[str, float]] = {}
    for row in rows:
        key = wanted.get((row.agent, row.config_hash))
        if key is not None and row.status == "ok":
            train.setdefault(key, {})[row.problem_id] = row.train_seconds
            by_problem = evaluate.setdefault(key, {})
            by_problem[row.problem_id] = by_problem.get(row.problem_id, 0.0) + row.eval_seconds
    return {key: (sum(t.values()) / len(t), sum(evaluate[key].values()) / len(evaluate[key]))
            for key, t in train.items()}


def _cost(b: Board, record: Mapping[str, Any]) -> tuple[float, float]:
    return b.times.get((record["agent"], record["config_hash"]), (math.nan, math.nan))


def _tuned(b: Board) -> list[dict[str, Any]]:
    """The board's records of each agent's tuned choice (not the default beside it)."""
    return [r for r in b.records if not r["extra_default"]]


# ----- HTML ---------------------------------------------------------------------------

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:75em;padding:0 1em;color:#222}
.scroll{overflow-x:auto}
figure.chart{display:inline-block;vertical-align:top;max-width:440px;margin:0 1em 1em 0}
table{border-collapse:collapse;margin:1em 0;font-variant-numeric:tabular-nums}
th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}
td.name,th.name{text-align:left}
tr.g1 td{background:#f2f8ee}
th button{font:inherit;font-weight:bold;border:0;background:none;cursor:pointer;padding:0}
.note{color:#555;font-size:90%}
img{max-width:100%;border:1px solid #eee}
code,pre{background:#f6f6f6;padding:.1em .3em}
"""

# Sorting and filtering, added to tables whose cells carry data-value.
_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function(table){
  var body=table.tBodies[0];
  table.querySelectorAll('th').forEach(function(th,col){
    var b=document.createElement('button');b.textContent=th.textContent;
    b.title='sort by '+th.textContent;th.textContent='';th.appendChild(b);
    b.addEventListener('click',function(){
      var up=th.getAttribute('aria-sort')!=='ascending';
      table.querySelectorAll('th').forEach(function(h){h.removeAttribute('aria-sort');});
      th.setAttribute('aria-sort',up?'ascending':'descending');
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,c){
        var x=a.cells[col].dataset.value,y=c.cells[col].dataset.value;
        var nx=parseFloat(x),ny=parseFloat(y);
        var d=(isNaN(nx)||isNaN(ny))?String(x).localeCompare(String(y)):nx-ny;
        return up?d:-d;});
      rows.forEach(function(r){body.appendChild(r);});});});
});
document.querySelectorAll('input.filter').forEach(function(input){
  input.hidden=false;
  var table=document.getElementById(input.dataset.table);
  input.addEventListener('input',function(){
    var q=input.value.toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows,function(r){
      r.hidden=q&&r.cells[1].textContent.toLowerCase().indexOf(q)<0;});});
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n{body}\n"
            f"<script>{_SCRIPT}</script></body></html>\n")


def _cell(value: Any, text: str | None = None, name: bool = False, title: str = "") -> str:
    """A cell whose shown text may differ from the value it sorts by."""
    sort = "" if isinstance(value, float) and math.isnan(value) else value
    attrs = f' data-value="{_e(sort)}"' + (' class="name"' if name else "")
    attrs += f' title="{_e(title)}"' if title else ""
    return f"<td{attrs}>{text if text is not None else _e(scoring.format_cell(value))}</td>"


def _pm(mean: float, se: float) -> str:
    return _e(scoring.plus_minus(mean, se))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"_{ord(m.group()):x}", name)


def agent_page(agent: str) -> str:
    """The file name of an agent's page."""
    return f"agent-{_slug(agent)}.html"


def compare_page(agent: str, baseline: str, sweep: str) -> str:
    """The file name of the page comparing two agents on a sweep."""
    return f"compare-{_slug(sweep)}-{_slug(agent)}-vs-{_slug(baseline)}.html"


def _device_keys(boards: Sequence[Board]) -> dict[str, str]:
    """A short key, (a), (b), ..., for each place rows were computed, in order of first use."""
    keys: dict[str, str] = {}
    for b in boards:
        for record in b.records:
            for place in b.devices.get(record["agent"], "").split("; "):
                if place and place not in keys:
                    keys[place] = chr(ord("a") + len(keys)) if len(keys) < 26 else str(len(keys))
    return keys


def _cost_cells(b: Board, agent: str, is_default: bool) -> list[str]:
    """The state size and FLOPs of the agent's default config (what :func:`board` measured),
    shown only on a row of that config."""
    cost = b.costs.get(agent)
    why = (f"the default config at {b.largest}" if cost is not None and is_default else
           "not the default config" if cost is not None else
           "trains outside JAX, or not a registered agent")
    if cost is None or not is_default:
        return [_cell(math.nan, "n/a", title=why), _cell(math.nan, "n/a", title=why)]
    return [_cell(cost.state_floats, f"{cost.state_floats:,}", title=why),
            _cell(cost.flops_per_input, _e(scoring.format_cell(cost.flops_per_input)),
                  title=why)]


def _leaderboard_table(b: Board, keys: Mapping[str, str]) -> str:
    metric, taus = b.metric, b.taus
    head = [f"group (tau {'/'.join(map(str, taus))})", "agent", "source", *(f"{metric}_{t}" for t in taus),
            *(f"{metric}_{t}_norm" for t in taus), f"{metric}_agg", "accuracy", "health",
            "problems", "train s/problem", "eval s/problem", "computed on", "state floats",
            "FLOPs/input", "flag"]
    table_id = f"board-{_slug(b.sweep)}"
    lines = [f'<input class="filter" data-table="{table_id}" placeholder="filter agents" hidden>',
             f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>'
             + "".join(f'<th{" class=name" if h in ("agent", "source", "flag") else ""}>{_e(h)}</th>'
                       for h in head) + "</tr></thead><tbody>"]
    for record in b.records:
        agent = record["agent"]
        groups = b.groups.get(agent, {})
        group_text = "/".join(str(groups.get(t, "-")) for t in taus)
        train, evaluate = _cost(b, record)
        places = [p for p in b.devices.get(agent, "").split("; ") if p]
        cells = [_cell(groups.get(taus[-1], math.nan), _e(group_text),
                       title=f"significance group at tau = {', '.join(map(str, taus))}"),
                 _cell(record["label"], f'<a href="{agent_page(agent)}">{_e(record["label"])}'
                       "</a>", name=True, title=f"config {record['config_hash']}"),
                 _cell(record["source"], name=True)]
        cells += [_cell(record[f"{metric}_{t}"], _pm(record[f"{metric}_{t}"],
                                                          record[f"{metric}_{t}_stderr"]))
                  for t in taus]
        cells += [_cell(record[f"{metric}_{t}_norm"], _pm(
            record[f"{metric}_{t}_norm"], record[f"{metric}_{t}_norm_stderr"])) for t in taus]
        cells += [_cell(record[f"{metric}_agg"]), _cell(record["accuracy"]),
                  _cell(record["health"]),
                  _cell(record["problems"], f"{record['problems']} of {record['of']}"),
                  _cell(train), _cell(evaluate),
                  _cell(",".join(keys[p] for p in places),
                        _e(", ".join(f"({keys[p]})" for p in places)), title="; ".join(places)),
                  *_cost_cells(b, agent, record["config_hash"] == counted.default_hashes(
                      [agent]).get(agent)),
                  _cell(record["flag"], name=True)]
        in_first = any(g == 1 for g in groups.values())
        lines.append(f'<tr{" class=g1" if in_first else ""}>' + "".join(cells) + "</tr>")
    lines.append("</tbody></table></div>")
    return "\n".join(lines)


def _comparison_table(records: Sequence[Mapping[str, Any]], loss: str) -> str:
    head = ["scope", *panels.COLUMNS, "num_train", "tau", f"{loss}_diff", "p_value", "pairs",
            "verdict", "source"]
    head = [h for h in head if any(h in r for r in records) or h in ("scope",)]
    lines = ['<table class="sortable"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
             + "</tr></thead><tbody>"]
    for r in records:
        cells = []
        for h in head:
            if h == f"{loss}_diff":
                cells.append(_cell(r[h], _pm(r[h], r["stderr"])))
            else:
                cells.append(_cell(r.get(h, ""), name=h in ("scope", "verdict", "source")))
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _figures(b: Board, out: pathlib.Path) -> tuple[str, list[pathlib.Path]]:
    """Figure 2 and the frontier of a board as HTML, and the files written."""
    try:
        from neural_testbed.figures import leaderboard as figures
    except ImportError:
        return ('<p class="note">Figures need matplotlib: pip install '
                "'neural-testbed[analysis]'.</p>", [])
    written, parts = [], []
    taus = b.taus
    name = f"figure2-{_slug(b.sweep)}.png"
    try:
        written.append(figures.figure_normalised_kl(
            b.records, out / name, b.normaliser, (taus[0], taus[-1])))
        parts.append(f'<figure><img src="{name}" alt="Figure 2 of {_e(b.sweep)}"><figcaption>'
                     f"Each agent's {b.metric} "
                     + (f"divided by {_e(b.normaliser)}'s" if any(
                         math.isfinite(r[f"{b.metric}_{taus[0]}_norm"]) for r in b.records)
                        else f"(raw: no {_e(b.normaliser)} rows to normalise by)")
                     + f', with standard errors (<a href="{name[:-4]}.pdf">PDF</a>).'
                     "</figcaption></figure>")
    except ValueError as error:
        parts.append(f'<p class="note">No Figure 2: {_e(error)}</p>')
    costs = {r["agent"]: sum(_cost(b, r)) for r in _tuned(b)}
    name = f"frontier-{_slug(b.sweep)}.png"
    try:
        written.append(figures.figure_frontier(_tuned(b), costs, b.devices, out / name))
        parts.append(f'<figure><img src="{name}" alt="quality against cost on '
                     f'{_e(b.sweep)}"><figcaption>{_e(b.metric)}_agg against train + evaluate '
                     "seconds per problem; the line joins the agents no other beats on both. "
                     f'Markers say where rows were computed: compare times within one kind (<a '
                     f'href="{name[:-4]}.pdf">PDF</a>).</figcaption></figure>')
    except ValueError as error:
        parts.append(f'<p class="note">No frontier figure: {_e(error)}</p>')
    return "\n".join(parts), written


def _index(boards: Sequence[Board], keys: Mapping[str, str], figures: Mapping[str, str],
           title: str) -> str:
    parts = [f"<h1>{_e(title)}</h1>",
             "<p>Each agent's globally tuned config on each sweep: the mean loss over the "
             "sweep's problems at each tau with its stratified standard error, normalised by "
             "the baseline's, and its cost. <b>group</b> is the significance group at each tau "
             "(1: the paired test of <code>neural-testbed compare</code> does not find it worse "
             "than the best agent at 5%; 2: not worse than the best of the rest; ...); rows in "
             "group 1 at some tau are shaded. <b>state floats</b> and <b>FLOPs/input</b> are "
             "of the agent's default config at the sweep's largest problem (each cell's tooltip "
             "names it): the floating-point numbers of its trained state and XLA's count of "
             "floating-point operations for one belief sample at one input; unlike seconds "
             "they do not depend on the machine. Click a column to sort.</p>"]
    parts.append("<nav>" + " · ".join(f'<a href="#{_slug(b.sweep)}">{_e(b.sweep)}</a>'
                                      for b in boards) + "</nav>")
    for b in boards:
        parts.append(f'<h2 id="{_slug(b.sweep)}">{_e(b.sweep)}: {len(b.problems)} problems, '
                     f"tau in {{{', '.join(map(str, b.taus))}}}</h2>")
        parts.append(_leaderboard_table(b, keys))
        if b.notes:
            parts.append('<ul class="note">' + "".join(f"<li>{_e(n)}</li>" for n in b.notes)
                         + "</ul>")
        parts.append(figures.get(b.sweep, ""))
    parts.append("<h2>Where rows were computed</h2><ul>" + "".join(
        f"<li>({k}) {_e(place)}</li>" for place, k in keys.items()) + "</ul>"
        '<p class="note">Times compare only between rows computed on the same kind of '
        "machine.</p>")
    return _page(title, "\n".join(parts))


_SERIES = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#332288",
           "#882255", "#999933")  # one per panel of a chart (Okabe-Ito, then Tol)


def _chart(b: Board, agent: str, tau: int, width: int = 420, height: int = 260) -> str:
    """An inline SVG of the agent's mean loss against T at ``tau``, a line per panel
    (:mod:`~neural_testbed.leaderboard.panels`), the normaliser dashed;
    each point's tooltip gives its value and standard error. No script, no library."""
    metric = b.metric
    mine = [r for r in b.by_setting if r["tau"] == tau and r["agent"] in (agent, b.normaliser)
            and math.isfinite(r[metric]) and r[metric] > 0]
    if not mine or not any(r["agent"] == agent for r in mine):
        return ""
    xs = sorted({r["num_train"] for r in mine})
    ys = [r[metric] for r in mine]
    lo, hi = math.log10(min(ys)), math.log10(max(ys))
    hi = hi if hi > lo else lo + 1
    left, right, top, bottom = 56, 10, 20, 30
    x_of = {t: left + (i + 0.5) * (width - left - right) / len(xs) for i, t in enumerate(xs)}
    y_of = lambda v: top + (hi - math.log10(v)) / (hi - lo) * (height - top - bottom)
    series = sorted({panels.panel(r) for r in mine})  # a line per panel
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{_e(agent)}: {_e(metric)} against T at tau = {tau}">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" '
             f'height="{height - top - bottom}" fill="none" stroke="#999"/>',
             f'<text x="{width / 2}" y="14" text-anchor="middle" font-size="12">'
             f"{_e(metric)} at tau = {tau} (log scale)</text>"]
    for t, x in x_of.items():
        parts.append(f'<text x="{x:.1f}" y="{height - 12}" text-anchor="middle" '
                     f'font-size="10">{t}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 1}" text-anchor="middle" '
                 'font-size="10">T (training pairs)</text>')
    for value in (10 ** lo, 10 ** hi):
        parts.append(f'<text x="{left - 4}" y="{y_of(value) + 3:.1f}" text-anchor="end" '
                     f'font-size="10">{value:.2g}</text>')
    for i, panel in enumerate(series):
        colour = _SERIES[i % len(_SERIES)]
        for who in (agent,) if agent == b.normaliser else (b.normaliser, agent):
            line = sorted(((r["num_train"], r) for r in mine if r["agent"] == who
                           and panels.panel(r) == panel), key=lambda point: point[0])
            dash = ' stroke-dasharray="4 3" opacity="0.6"' if who != agent else ""
            points = " ".join(f"{x_of[t]:.1f},{y_of(r[metric]):.1f}" for t, r in line)
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.5"{dash}/>')
            for t, r in line:
                parts.append(
                    f'<circle cx="{x_of[t]:.1f}" cy="{y_of(r[metric]):.1f}" r="3" '
                    f'fill="{colour if who == agent else "white"}" stroke="{colour}"><title>'
                    f"{_e(who)}, {_e(panels.title(panel))}, T = {t}: "
                    f"{_e(scoring.plus_minus(r[metric], r[f'{metric}_stderr']))}"
                    "</title></circle>")
    parts.append("</svg>")
    legend = ", ".join(f'<span style="color:{_SERIES[i % len(_SERIES)]}">&#9632;</span> '
                       f"{_e(panels.title(p))}" for i, p in enumerate(series))
    return ('<figure class="chart">' + "".join(parts) + f'<figcaption class="note">{legend}; '
            f"solid: {_e(agent)}, dashed: {_e(b.normaliser)}. Hover a point for its value."
            "</figcaption></figure>")


def _settings_table(b: Board, agent: str) -> str:
    """An agent's mean loss per setting (a row) and tau (a column), with standard errors."""
    metric, taus = b.metric, b.taus
    mine = [r for r in b.by_setting if r["agent"] == agent]
    keys = [h for h in (*panels.COLUMNS, "num_train") if any(h in r for r in mine)]
    by_setting: dict[tuple, dict[int, Mapping[str, Any]]] = {}
    for r in mine:
        by_setting.setdefault(tuple(r.get(k) for k in keys), {})[r["tau"]] = r
    head = [*keys, *(f"{metric}_{t}" for t in taus), "problems"]
    lines = ['<table class="sortable"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
             + "</tr></thead><tbody>"]
    for setting, at in by_setting.items():
        cells = [_cell(v) for v in setting]
        cells += [_cell(at[t][metric], _pm(at[t][metric], at[t][f"{metric}_stderr"]))
                  if t in at else _cell(math.nan, "n/a") for t in taus]
        cells.append(_cell(next(iter(at.values()))["problems"]))
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join([*lines, "</tbody></table>"])


def _agent(agent: str, boards: Sequence[Board], pairs: Mapping[str, str]) -> str:
    parts = [f'<p><a href="index.html">leaderboard</a></p><h1>{_e(agent)}</h1>']
    for b in boards:
        mine = [r for r in _tuned(b) if r["agent"] == agent]
        if not mine:
            continue
        record = mine[0]
        parts.append(f"<h2>{_e(b.sweep)}</h2><p>rank {b.records.index(record) + 1} of "
                     f"{len(b.records)}; source: {_e(record['source'])}; computed on: "
                     f"{_e(b.devices.get(agent, ''))}</p>")
        try:
            config = json.dumps(json.loads(record["config"]), indent=1)
        except (TypeError, ValueError):
            config = str(record["config"])
        parts.append(f"<p>config {_e(record['config_hash'])}:</p><pre>{_e(config)}</pre>")
        parts.append(_settings_table(b, agent))
        parts.append('<div class="charts">' + "".join(_chart(b, agent, t) for t in b.taus)
                     + "</div>")
        if b.sweep in pairs:
            other = pairs[b.sweep]
            parts.append(f'<p><a href="{compare_page(agent, other, b.sweep)}">{_e(agent)} '
                         f"against {_e(other)}</a>, per setting.</p>")
    return _page(f"{agent}: neural-testbed", "\n".join(parts))


def _compare(agent: str, baseline: str, b: Board) -> str:
    pair = [r for r in b.rows if r.agent in (agent, baseline)]  # all compare reads
    records = scoring.compare_agents(pair, b.problems, agent, [baseline])
    return _page(f"{agent} vs {baseline} on {b.sweep}", "\n".join([
        f'<p><a href="index.html">leaderboard</a> · <a href="{agent_page(agent)}">'
        f"{_e(agent)}</a></p><h1>{_e(agent)} against {_e(baseline)} on {_e(b.sweep)}</h1>",
        f"<p>Paired differences ({_e(agent)} minus {_e(baseline)}, problem by problem; "
        "negative is better) pooled over the sweep, then per setting, with two-sided "
        "t-tests, as <code>neural-testbed compare</code> prints them.</p>",
        _comparison_table(records, b.metric)]))


def write_site(out: str | os.PathLike, boards: Sequence[Board],
               comparisons: Iterable[tuple[str, str]] = (),
               title: str = "neural-testbed leaderboard") -> list[pathlib.Path]:
    """Writes ``index.html``, a page per agent, a comparison page per agent against its
    sweep's leader (and per pair of ``comparisons``) and the figures into ``out``
    (created if missing); returns the files written. Existing files of other names are
    left alone."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    keys = _device_keys(boards)
    written: list[pathlib.Path] = []
    figures = {}
    for b in boards:
        figures[b.sweep], files = _figures(b, out)
        written += files

    def write(name: str, text: str) -> None:
        with outputs.written_whole(out / name, "w") as file:
            file.write(text)
        written.append(out / name)

    write("index.html", _index(boards, keys, figures, title))
    agents = sorted({r["agent"] for b in boards for r in b.records})
    for agent in agents:
        pairs = {}
        for b in boards:
            names = [r["agent"] for r in _tuned(b)]
            if agent in names and len(names) > 1:
                pairs[b.sweep] = names[1] if names[0] == agent else names[0]
        for b in boards:
            if b.sweep in pairs:
                write(compare_page(agent, pairs[b.sweep], b.sweep),
                      _compare(agent, pairs[b.sweep], b))
        write(agent_page(agent), _agent(agent, boards, pairs))
    for agent, baseline in comparisons:
        for b in boards:
            present = {r["agent"] for r in b.records}
            if agent in present and baseline in present:
                write(compare_page(agent, baseline, b.sweep), _compare(agent, baseline, b))
    return written
