"""The paper's figures as PNG files, from stored results.

Figure 2 (normalised KL per agent), Figures 8 and 9 (KL against T per
temperature), Figure 10 (normalised d_KL^100 against training time), Figure 5
(an environment's class-probability map beside sampled members of an agent)
and Figure 6b (real-data against testbed scores, one point per config), each on
a canvas of :mod:`neural_testbed.figures.canvas`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pathlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from matplotlib import ticker

from neural_testbed import base, generative
from neural_testbed.agents import host, registry
from neural_testbed.figures.canvas import (
    legend_handles,
    loss_label,
    new_figure,
    save_figure,
    tau_label,
)
from neural_testbed.leaderboard import baselines, panels, scoring
from neural_testbed.leaderboard import configs as configs_lib
from neural_testbed.leaderboard import problems as problems_lib

__all__ = [
    "agent_colours",
    "best_prior_scales",
    "figure_agent_samples",
    "figure_frontier",
    "figure_kl_vs_num_train",
    "figure_kl_vs_time",
    "figure_normalised_kl",
    "figure_prior_functions",
    "figure_testbed_vs_real",
    "prior_function_label",
    "prior_function_ratios",
    "save_figures",
]

_SIZE_FIGURE_2 = (10, 4)  # inches (x canvas.PNG_DPI: the PNG's pixels)
_SIZE_FIGURES_8_9 = (12, 4)
_SIZE_FIGURE_10 = (7, 5)
_SIZE_FRONTIER = (7, 4.5)
# Marker per kind of machine rows were computed on: times compare only within a kind.
_DEVICE_MARKERS = {"GPU": "s", "CPU": "o", "mixed": "D", "not recorded": "^"}
_SIZE_FIGURE_6B = (7, 6)
_SIZE_FIGURE_7 = (10, 7)
_PANEL_FIGURE_5 = 3  # inches per panel, plus 1 for the colour bar; 4 high
_GRID_LIMIT = 3.0  # Figure 5 shows inputs in [-3, 3]^2


# Each built-in agent's colour, the same in every figure whatever else a figure holds:
# Okabe & Ito's colour-blind-safe set, then Paul Tol's where the seven run out; related
# agents (ensemble, ensemble+) share a hue, dark and light; a grey for uniform. The rest
# were chosen so that no two agents that can share a figure (the classification agents,
# the regression agents) are closer than 10 in CIELAB (Delta E 1976) under normal vision
# or simulated protan-, deutan- or tritanopia (tests/figures/test_leaderboard.py).
_AGENT_COLOURS = {
    "ensemble": "#0072B2", "ensemble+": "#56B4E9", "hypermodel": "#332288",
    "epinet": "#D55E00", "dropout": "#E69F00", "bbb": "#CC79A7", "sgmcmc": "#009E73",
    "laplace": "#663333", "knn": "#999933", "random_forest": "#F0E442",
    "deep_kernel": "#117733", "mlp": "#555555", "uniform": "#BBBBBB",
    "average_class_probs": "#AA3377", "oracle_gp": "#99DDFF", "gp": "#FFAABB",
    "cnp": "#DDCC77", "np": "#004488", "anp": "#225522", "logistic": "#CCAA66",
    "hmc": "#CC2222", "svgp": "#FF5577", "nng": "#9900FF",
}
# For other agents (sorted by name): the rest of Tol's muted set, then his "light" set.
_SPARE_COLOURS = ("#44AA99", "#88CCEE", "#77AADD", "#EE8866", "#EEDD88", "#FFAABB",
                  "#99DDFF", "#AAAA00", "#BBCC33")


def agent_colours(agents: Iterable[str], baseline: str | None = None) -> dict[str, Any]:
    """Each built-in agent's fixed colour; other names (sorted) take the spare colours in
    turn; black for the baseline."""
    others = itertools.cycle(_SPARE_COLOURS)
    colours = {name: _AGENT_COLOURS.get(name) or next(others) for name in sorted(set(agents))}
    if baseline in colours:
        colours[baseline] = "black"
    return colours


def _label_colours(labels: Iterable[str]) -> dict[str, Any]:
    """One colour per label (sorted), for lines that are not agents (an agent's configs)."""
    names = sorted(set(labels))
    palette = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"].colors
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


class _PlainLogFormatter(ticker.LogFormatter):
    """A log axis labelled where :class:`~matplotlib.ticker.LogFormatter` would label it,
    in plain numbers ("0.3", "20"): it writes "3e-01" below 1, which overlaps its neighbours."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def _source_labels(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each agent's legend name, marked where any of its records' rows are published
    (``source``, see :mod:`neural_testbed.leaderboard.counted`)."""
    sources: dict[str, set[str]] = {}
    for r in records:
        sources.setdefault(r["agent"], set()).update(r.get("source", "local").split("+"))
    return {agent: agent + (" [published]" if found == {"published"} else
                            " [partly published]" if "published" in found else "")
            for agent, found in sources.items()}


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:  # None, or not a number
        return False


def figure_normalised_kl(
    records: Sequence[Mapping[str, Any]], path: str | os.PathLike, baseline: str = "mlp",
    taus: tuple[int, int] = (1, 100),
) -> pathlib.Path:
    """The paper's Figure 2: each agent's KL divided by the baseline's, at the sweep's two
    taus (1 and 100 on the paper's, 1 and 10 on the current sweeps).

    Bars carry their standard error (for a normalised value, the delta-method
    error of the paired ratio). When no record has a normalised value (no
    baseline results), the raw KL is drawn and the axis label says so. Agents
    that miss problems (or clipped infinite KL terms) are starred.

    Args:
      records: ``scoring.score_agents(rows, problems, tuning="per-setting")[0]``.
      path: the PNG file to write.
      baseline: the agent the values are normalised by (labels only).
      taus: the two taus drawn, one panel each.

    Returns:
      ``path``.
    """
    if not records:
        raise ValueError("no agent records to plot")
    colours = agent_colours((r["agent"] for r in records), baseline)
    figure = new_figure(_SIZE_FIGURE_2)
    axes = figure.subplots(1, 2)
    positions = np.arange(len(records))
    labels = [r.get("label", r["agent"]) for r in records]
    all_published = all(r.get("source") == "published" for r in records)
    if all_published:  # said once below the panels, not under every bar
        labels = [label.removesuffix(scoring.SOURCE_MARKS["published"]) for label in labels]
    labels = [label + ("*" if r.get("flag") else "") for label, r in zip(labels, records)]
    loss = records[0]["metric"]
    for ax, tau in zip(axes, taus):
        normalised = any(_finite(r[f"{loss}_{tau}_norm"]) for r in records)
        values, errors = [], []
        for r in records:
            name = f"{loss}_{tau}_norm" if normalised else f"{loss}_{tau}"
            se = r.get(f"{name}_stderr", math.nan)
            values.append(r[name])
            errors.append(se if _finite(se) else 0.0)
        heights = [v if _finite(v) else 0.0 for v in values]
        ax.bar(positions, heights, yerr=errors, capsize=3,
               color=[colours[r["agent"]] for r in records], edgecolor="black",
               linewidth=0.5)
        # Each label above its error bar's cap, never on it; ratios to two decimals (their
        # standard errors are a few hundredths), so that a dozen labels do not collide.
        text = "{:.2f}" if normalised else "{:.3g}"
        for x, height, error, value in zip(positions, heights, errors, values):
            ax.annotate(text.format(value) if _finite(value) else "n/a", (x, height + error),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8 if len(records) <= 8 else 7,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
        if normalised:
            ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
            ax.set_ylabel(f"{loss_label(tau, loss)} / {baseline}'s {loss_label(tau, loss)}")
        else:
            ax.set_ylabel(f"{loss_label(tau, loss)} (raw: no {baseline} results to normalise "
                          "by)")
        ax.set_title(tau_label(tau))
        ax.set_xticks(positions, labels, rotation=40, ha="right", rotation_mode="anchor")
        ax.set_ylim(0, max(h + e for h, e in zip(heights, errors)) * 1.15 or 1.0)
    captions = (["every bar: the published baseline rows"] if all_published else []) + (
        ["* flagged: missing problems or clipped KL terms"]
        if any(r.get("flag") for r in records) else [])
    if captions:
        figure.supxlabel("; ".join(captions), fontsize=9)
    return save_figure(figure, path)


def figure_kl_vs_num_train(
    setting_records: Sequence[Mapping[str, Any]],
    tau: int,
    path: str | os.PathLike,
    baseline: str = "mlp",
) -> pathlib.Path:
    """The paper's Figures 8 (tau = 1) and 9 (tau = 100): KL against T per temperature.

    One panel per temperature; one line per agent with the mean KL over seeds
    and its standard error; the baseline agent as a dashed black line.

    Args:
      setting_records: ``scoring.kl_by_setting(rows, problems, ...)``.
      tau: which tau's KL to draw.
      path: the PNG file to write.
      baseline: the agent drawn dashed.

    Returns:
      ``path``.
    """
    records = [r for r in setting_records if r["tau"] == tau and _finite(r[r["metric"]])]
    if not records:
        raise ValueError(f"no KL results at tau={tau} to plot")
    colours = agent_colours((r["agent"] for r in records), baseline)
    # A column of panels per temperature (noise variance on regression, dataset on real
    # data); a row per input dimension where the settings name it (the current sweep's
    # d in {2, 10, 100}, regression's d; a 2-d problem's setting does not).
    columns = sorted({panels.panel(r, skip=("input_dim",)) for r in records})
    dims = sorted({r.get("input_dim", 2) for r in records}) if any(
        "input_dim" in r for r in records) else [None]
    width, height = _SIZE_FIGURES_8_9
    figure = new_figure((width, height * (0.8 * len(dims) if len(dims) > 1 else 1)))
    grid = figure.subplots(len(dims), len(columns), squeeze=False)
    axes = list(grid.flat)
    places = [(d, c) for d in dims for c in columns]
    agents = sorted({r["agent"] for r in records}, key=lambda a: (a == baseline, a))
    names = _source_labels(records)
    for ax, (input_dim, column) in zip(axes, places):
        for agent in agents:
            points = sorted((r["num_train"], r[r["metric"]], r[f"{r['metric']}_stderr"])
                            for r in records
                            if r["agent"] == agent
                            and panels.panel(r, skip=("input_dim",)) == column
                            and (input_dim is None or r.get("input_dim", 2) == input_dim))
            if not points:
                continue
            num_train, kl, se = zip(*points)
            is_base = agent == baseline
            ax.errorbar(num_train, kl, yerr=[s if _finite(s) else 0.0 for s in se],
                        label=names[agent], color=colours[agent],
                        linestyle="--" if is_base else "-",
                        linewidth=2 if is_base else 1.5, marker="o", markersize=4, capsize=2)
        ax.set_xscale("log")
        ax.set_xlabel("T (training pairs)")
        ax.set_title(panels.title(((("input_dim", input_dim),) if input_dim else ()) + column))
        ax.grid(alpha=0.3)
    real = records[0]["metric"] == "nll"  # real data: the NLL
    for row in grid:
        row[0].set_ylabel(f"{loss_label(tau, 'nll' if real else 'kl')} (mean over seeds)")
    legend = legend_handles(axes)
    # Outside the panels, to their right: over the data, it hid the curves it names.
    figure.legend(legend.values(), legend.keys(), fontsize=8, loc="outside right upper")
    figure.suptitle(f"{'NLL' if real else 'KL'} at {tau_label(tau)} against the number of "
                    "training pairs")
    return save_figure(figure, path)


def figure_kl_vs_time(
    candidate_records: Sequence[Mapping[str, Any]],
    baseline_kl: float,
    path: str | os.PathLike,
    baseline: str = "mlp",
    tau: int = 100,
    devices: Mapping[str, str] | None = None,
) -> pathlib.Path:
    """The paper's Figure 10: normalised d_KL^tau (tau = 100 there) against seconds per
    problem; with ``devices`` (agent -> where its rows were computed) naming more than one
    kind of machine, the marker says which.

    One point per config, coloured by agent; a config scored on fewer problems
    than the most complete one is drawn hollow. When ``baseline_kl`` is not a
    positive number the raw d_KL^100 is drawn and the axis label says so.

    Args:
      candidate_records: ``scoring.score_candidates(rows, problems)``.
      baseline_kl: the baseline agent's d_KL^tau, the normaliser.
      path: the PNG file to write.
      baseline: the baseline's name (labels only).
      tau: the tau drawn.

    Returns:
      ``path``.
    """
    records = [r for r in candidate_records if _finite(r[f"{r['metric']}_{tau}"])
               and _finite(r["seconds_per_problem"]) and r["seconds_per_problem"] > 0]
    if not records:
        raise ValueError(f"no configs with a finite d_KL^{tau} and a positive time to plot")
    normalised = _finite(baseline_kl) and baseline_kl > 0
    divisor = baseline_kl if normalised else 1.0
    colours = agent_colours((r["agent"] for r in records), baseline)
    most = max(r["problems"] for r in records)
    names = _source_labels(records)
    markers, key = _device_markers({r["agent"] for r in records}, devices or {})
    figure = new_figure(_SIZE_FIGURE_10)
    ax = figure.subplots()
    for agent in sorted({r["agent"] for r in records}):
        mine = [r for r in records if r["agent"] == agent]
        full = [r["problems"] == most for r in mine]
        ax.scatter([r["seconds_per_problem"] for r in mine],
                   [r[f"{r['metric']}_{tau}"] / divisor for r in mine],
                   label=names[agent], s=30, edgecolors=colours[agent], linewidths=1.2,
                   marker=markers[agent],
                   facecolors=[colours[agent] if f else "none" for f in full])
    ax.set_xscale("log")
    ax.set_xlabel("seconds per problem (train + evaluate)")
    if normalised:
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_ylabel(f"{loss_label(tau)} / {baseline}'s {loss_label(tau)}")
    else:
        ax.set_ylabel(f"{loss_label(tau)} (raw: no {baseline} results to normalise by)")
    title = f"{loss_label(tau)} against compute, one point per config"
    if not all(r["problems"] == most for r in records):
        title += "\n(hollow: scored on fewer problems)"
    title += key
    ax.set_title(title)
    ax.grid(alpha=0.3)
    figure.legend(fontsize=8, loc="outside right upper")  # beside the points, not over them
    return save_figure(figure, path)


def device_kind(computed: str) -> str:
    """``GPU``, ``CPU``, ``mixed`` or ``not recorded``, from where rows were computed."""
    gpu = any(word in computed for word in ("GPU", "H100", "H200", "NVIDIA"))
    # "on an N-core <arch> CPU" ran on the CPU; a GPU machine's "(N CPU cores)" did not.
    cpu = re.search(r"\d+-core \S+ CPU", computed) is not None or (
        "CPU" in computed and not gpu)
    return "mixed" if gpu and cpu else "GPU" if gpu else "CPU" if cpu else "not recorded"


def _device_markers(agents: Iterable[str], devices: Mapping[str, str],
                    ) -> tuple[dict[str, str], str]:
    """A marker per agent by the kind of machine its rows ran on, and the title's key to
    them; one kind (or nothing known) is circles and no key."""
    kinds = {agent: device_kind(devices.get(agent, "")) for agent in agents}
    if len(set(kinds.values())) <= 1:
        return {agent: "o" for agent in kinds}, ""
    symbols = {"o": "\u25cb", "s": "\u25a1", "D": "\u25c7", "^": "\u25b3"}
    key = ", ".join(f"{symbols[_DEVICE_MARKERS[k]]} {k}" for k in sorted(set(kinds.values())))
    return ({agent: _DEVICE_MARKERS[kind] for agent, kind in kinds.items()},
            f"\n({key}: compare times within one marker)")


def figure_frontier(records: Sequence[Mapping[str, Any]], seconds: Mapping[str, float],
                    devices: Mapping[str, str], path: str | os.PathLike) -> pathlib.Path:
    """Quality against cost: each agent's d_KL^agg (or NLL^agg) against its train +
    evaluate seconds per problem, the frontier (the agents no other beats on both) drawn
    as a line, the marker saying where its rows were computed (:func:`device_kind`).

    Args:
      records: ``scoring.score_agents`` records, one per agent.
      seconds: agent -> seconds per problem.
      devices: agent -> where its rows were computed.
      path: the PNG file to write (a PDF beside it).
    """
    points = [(seconds[r["agent"]], r[f"{r['metric']}_agg"], r) for r in records
              if _finite(seconds.get(r["agent"])) and seconds[r["agent"]] > 0
              and _finite(r[f"{r['metric']}_agg"])]
    if not points:
        raise ValueError("no agent with a finite score and a positive time to plot")
    metric = points[0][2]["metric"]
    colours = agent_colours(r["agent"] for _, _, r in points)
    markers, key = _device_markers((r["agent"] for _, _, r in points), devices)
    figure = new_figure(_SIZE_FRONTIER)
    ax = figure.subplots()
    for x, y, r in points:
        ax.scatter([x], [y], s=40, marker=markers[r["agent"]], color=colours[r["agent"]],
                   label=r["agent"], zorder=3)
    frontier, best = [], math.inf
    for x, y, _ in sorted(points, key=lambda p: (p[0], p[1])):
        if y < best:
            frontier.append((x, y))
            best = y
    ax.step([x for x, _ in frontier], [y for _, y in frontier], where="post", color="grey",
            linewidth=1, zorder=2)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(_PlainLogFormatter())
    ax.xaxis.set_minor_formatter(_PlainLogFormatter(minor_thresholds=(2, 0.5)))
    ax.set_xlabel("seconds per problem (train + evaluate)")
    ax.set_ylabel(f"{loss_label('agg', metric)}")
    ax.set_title(f"{loss_label('agg', metric)} against cost{key}")
    ax.grid(alpha=0.3)
    figure.legend(fontsize=8, loc="outside right upper")
    return save_figure(figure, path)


def figure_testbed_vs_real(
    records: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    regime: str = "high data",
    baseline: str = "mlp",
) -> pathlib.Path:
    """The paper's Figure 6b: each config's real-data score against its testbed score.

    One point per (agent, config) of ``regime``, one colour per agent, its
    correlation in the legend; the baseline's default config sits at (1, 1).
    Log axes when every score is positive (scores are ratios to the baseline).

    Args:
      records: ``correlation.correlate(...)``; those of other regimes are ignored.
      path: the PNG file to write.
      regime: which regime's points to draw.
      baseline: the agent the scores are normalised by (labels only).

    Returns:
      ``path``.

    Raises:
      ValueError: if no record of ``regime`` has a config to draw.
    """
    records = [r for r in records if r["regime"] == regime and r["configs"]]
    if not records:
        raise ValueError(f"no configs with testbed and real-data scores in the {regime} regime "
                         "to plot")
    colours = agent_colours(r["agent"] for r in records)
    figure = new_figure(_SIZE_FIGURE_6B)
    ax = figure.subplots()
    for r in records:
        value = f"{r['correlation']:.2f}" if _finite(r["correlation"]) else "n/a"
        bounds = f" ({r['p5']:.2f}, {r['p95']:.2f})" if _finite(r["p5"]) else ""
        ax.scatter(r["synthetic_scores"], r["real_scores"], s=30, color=colours[r["agent"]],
                   edgecolors="black", linewidths=0.4,
                   label=f"{r['agent']}: r = {value}{bounds}, {r['configs']} config"
                         + ("s" if r["configs"] != 1 else ""))
    if all(v > 0 for r in records for v in (*r["synthetic_scores"], *r["real_scores"])):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(_PlainLogFormatter())
            axis.set_minor_formatter(_PlainLogFormatter(minor_thresholds=(2, 0.5)))
    ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"testbed score ($d_{{\\mathrm{{KL}}}}$ / {baseline}'s default, mean over "
                  "taus and problems)")
    ax.set_ylabel(f"real-data score (NLL / {baseline}'s default, same means)")
    ax.set_title(f"Testbed against real data, {regime}: one point per config\n"
                 "r: Pearson across configs (5th, 95th bootstrap percentiles)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(figure, path)


def save_figures(
    rows: Iterable[base.ProblemResult],
    problems: Mapping[str, problems_lib.Problem],
    out_dir: str | os.PathLike,
    baseline: str | None = None,
) -> list[pathlib.Path]:
    """Writes figure2.png, figure8.png, figure9.png and figure10.png into ``out_dir``,
    and figure7.png where the rows hold ensemble+ configs with two or more prior
    functions (:func:`figure_prior_functions`).

    Figures 2, 8 and 9 use per-setting tuning (the best config per
    (temperature, T), as the paper does), so the three show the same tuned
    results. Figures 2 and 10 normalise by the baseline's default config (the
    normaliser of every table, see :func:`scoring.score_agents`).

    Args:
      rows: stored rows (``ResultsStore.rows()``).
      problems: the sweep, problem id -> Problem (``get_sweep(name)``).
      out_dir: the folder to write to; created if missing.
      baseline: the agent KL is normalised by and drawn dashed; None: the sweep's
        default (:func:`scoring.default_normaliser`: uniform on the current sweeps,
        mlp on the paper's).

    Returns:
      The paths written.

    Raises:
      ValueError: if no row is an ok result of the sweep's problems.
    """
    rows = list(rows)
    out_dir = pathlib.Path(out_dir)
    baseline = baseline or scoring.default_normaliser(problems)
    taus = sorted({t for p in problems.values() for t in p.taus})
    small, big = taus[0], taus[-1]
    tuned = scoring.score_agents(rows, problems, tuning="per-setting", baseline=baseline)[0]
    if not any(r["problems"] for r in tuned):
        raise ValueError("no ok results for the sweep's problems in these rows; run "
                         "`neural-testbed sweep` (or `run`) on this sweep first")
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = scoring.kl_by_setting(rows, problems, tuning="per-setting")
    published = any(getattr(r, "source", "local") == "published" for r in rows)
    devices = baselines.computed_on(baselines.load(), rows) if published else {}
    global_tuned = scoring.score_agents(rows, problems, tuning="global", baseline=baseline)[0]
    default = configs_lib.config_hash(baseline, registry.AGENTS[baseline].default) \
        if baseline in registry.AGENTS else None
    base_kl = next((r[f"{r['metric']}_{big}"] for r in global_tuned if r["agent"] == baseline
                    and r["config_hash"] == default), math.nan)
    paths = [
        figure_normalised_kl(tuned, out_dir / "figure2.png", baseline, (small, big)),
        figure_kl_vs_num_train(settings, small, out_dir / "figure8.png", baseline),
        figure_kl_vs_num_train(settings, big, out_dir / "figure9.png", baseline),
        figure_kl_vs_time(scoring.score_candidates(rows, problems), base_kl,
                          out_dir / "figure10.png", baseline, big, devices),
    ]
    priors = {prior_function_label(json.loads(r.config) or {}) for r in rows
              if r.agent == "ensemble+" and r.problem_id in problems}
    if len(priors) >= 2:
        paths.append(figure_prior_functions(rows, problems, out_dir / "figure7.png",
                                            baseline=baseline))
    return paths


def prior_function_label(config: Mapping[str, Any]) -> str:
    """An ensemble+ config's prior, as Figure 7 names it: none, or its prior function."""
    if not config.get("prior_scale"):
        return "none"
    return config.get("prior_function", "environment")


def prior_function_ratios(
    rows: Iterable[base.ProblemResult], problems: Mapping[str, Any], agent: str = "ensemble+",
    baseline: str = "mlp",
) -> dict[tuple[Any, int, str, float], dict[int, list[float]]]:
    """Figure 7's numbers: (stratum's first coordinate, tau, prior, prior scale) -> T ->
    per-seed ratios of the agent's value (d_KL or NLL, as the problem's metric says) to
    the baseline default config's on the same problem and tau."""
    base_hash = configs_lib.config_hash(baseline, registry.get_agent(baseline).default)
    ok = [(r, problems[r.problem_id]) for r in rows
          if r.status == "ok" and r.problem_id in problems]
    reference = {(r.problem_id, r.tau): r.estimate(p.metric)[0] for r, p in ok
                 if r.agent == baseline and r.config_hash == base_hash}
    ratios: dict[tuple[Any, int, str, float], dict[int, list[float]]] = {}
    for r, problem in ok:
        key = (r.problem_id, r.tau)
        if r.agent != agent or key not in reference or not reference[key] > 0:
            continue
        config = json.loads(r.config) or {}
        label = prior_function_label(config)
        scale = 0.0 if label == "none" else float(config.get("prior_scale", 0.0))
        where = panels.panel(problem.stratum_columns)
        cell = ratios.setdefault((where, r.tau, label, scale), {})
        cell.setdefault(problem.num_train, []).append(r.estimate(problem.metric)[0]
                                                      / reference[key])
    return ratios


def best_prior_scales(
    ratios: Mapping[tuple[Any, int, str, float], Mapping[int, Sequence[float]]],
) -> dict[tuple[Any, int, str], float]:
    """(dataset, tau, prior) -> the prior scale whose ratios, pooled over T and seeds,
    have the lowest mean: Figure 7 shows each prior function at its best scale.

    Chosen and shown on the same problems, so the curves are optimistic for a prior
    with many scales, as the leaderboard's ``same`` selection is; ``none`` has one."""
    best: dict[tuple[Any, int, str], tuple[float, float]] = {}
    for (where, tau, label, scale), by_t in sorted(ratios.items(), key=lambda kv: kv[0][3]):
        mean = float(np.mean([v for values in by_t.values() for v in values]))
        if (where, tau, label) not in best or mean < best[(where, tau, label)][0]:
            best[(where, tau, label)] = (mean, scale)
    return {key: scale for key, (_, scale) in best.items()}


def figure_prior_functions(
    rows: Iterable[base.ProblemResult],
    problems: Mapping[str, Any],
    path: str | os.PathLike,
    agent: str = "ensemble+",
    baseline: str = "mlp",
) -> pathlib.Path:
    """The paper's Figure 7: ensemble+ with each prior function, relative to the baseline.

    One panel per (tau, dataset); per prior function (``none`` when prior_scale
    is 0, else ``prior_function``) at its best scale in that panel
    (:func:`best_prior_scales`, named in the legend), the mean over seeds of the
    agent's NLL divided by the baseline default config's on the same problem,
    against T, with its standard error over seeds. Below 1 the prior helps.

    Args:
      rows: stored rows with ``agent`` configs differing in their prior and the
        baseline's default config.
      problems: problem id -> problem (a real-data sweep, or any sweep: panels
        are the problems' strata's first coordinate).
      path: the PNG file to write.
      agent: the agent whose configs are compared.
      baseline: the agent the NLLs are divided by (its default config).

    Raises:
      ValueError: if no problem has rows of both the agent and the baseline's default.
    """
    ratios = prior_function_ratios(rows, problems, agent, baseline)
    if not ratios:
        raise ValueError(f"no problem has ok rows of both {agent} and {baseline}'s default "
                         "config to compare")
    best = best_prior_scales(ratios)
    places = sorted({(tau, where) for where, tau, _ in best}, key=lambda x: (x[0], str(x[1])))
    taus, wheres = sorted({t for t, _ in places}), sorted({w for _, w in places}, key=str)
    labels = sorted({label for _, _, label in best})
    colours = _label_colours(labels)
    figure = new_figure(_SIZE_FIGURE_7)
    axes = figure.subplots(len(taus), len(wheres), squeeze=False)
    for i, tau in enumerate(taus):
        for j, where in enumerate(wheres):
            ax = axes[i][j]
            for label in labels:
                if (where, tau, label) not in best:
                    continue
                scale = best[(where, tau, label)]
                by_t = ratios[(where, tau, label, scale)]
                ts = sorted(by_t)
                means = [float(np.mean(by_t[t])) for t in ts]
                ses = [float(np.std(by_t[t], ddof=1) / np.sqrt(len(by_t[t])))
                       if len(by_t[t]) > 1 else 0.0 for t in ts]
                name = label if label == "none" else f"{label} (scale {scale:g})"
                ax.errorbar(ts, means, yerr=ses, label=name, color=colours[label], marker="o",
                            markersize=4, capsize=2)
            ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_title(f"{panels.title(where)}, {tau_label(tau)}")
            ax.grid(alpha=0.3)
            ax.legend(title="prior function", fontsize=7, title_fontsize=7)
            if i == len(taus) - 1:
                ax.set_xlabel("T (training pairs)")
            if j == 0:
                ax.set_ylabel(f"{agent} / {baseline} (mean over seeds)")
    figure.suptitle(f"{agent} prior functions relative to {baseline}, each at its best scale "
                    "(below 1: the prior helps)")
    return save_figure(figure, path)


def _trained(agent: base.Agent | base.HostAgent, key: jax.Array, data: base.Data, prior,
             num_classes: int) -> tuple[base.ENN, Any]:
    """The agent's ENN and its state trained on ``data``, as the runner trains it: a JAX
    agent under jit; a host agent (scikit-learn's random forest, ...) on the host, its
    state kept in a table that the ENN's callback reads by handle."""
    if not isinstance(agent, base.HostAgent):
        return agent.enn, jax.jit(agent.train)(key, data, prior)
    states = host.HostStates()
    prior = prior.replace(temperature=float(prior.temperature))
    handle = states.put(agent.train(host.host_seed(key), jax.device_get(data), prior))
    return host.host_enn(agent, states, num_classes), np.int32(handle)


def figure_agent_samples(
    key: jax.Array,
    agent: base.Agent | base.HostAgent,
    problem: problems_lib.Problem,
    path: str | os.PathLike,
    num_members: int = 4,
    grid_size: int = 100,
) -> pathlib.Path:
    """The paper's Figure 5: the environment beside sampled members of a trained agent.

    Trains ``agent`` on ``problem`` with the runner's key (agent seed 0), then
    draws the environment's class-1 probability over [-3, 3]^2 with the training
    points, and the class-1 probability of ``num_members`` sampled members, each
    with its 0.5 decision boundary.

    Args:
      key: draws the members' indices.
      agent: the agent built for the problem, e.g.
        ``agents.get_agent("mlp").make(config, base.Shapes.of(problem))``; a host agent
        (``random_forest``) too.
      problem: a problem with ``input_dim == 2``.
      path: the PNG file to write.
      num_members: how many sampled members to draw.
      grid_size: grid points per axis.

    Returns:
      ``path``.

    Raises:
      ValueError: if the problem's inputs are not 2-d, or the counts are < 1 (< 2).
    """
    if problem.input_dim != 2:
        raise ValueError(f"Figure 5 maps a 2-d input space; problem {problem.problem_id} "
                         f"has input_dim={problem.input_dim}")
    if num_members < 1 or grid_size < 2:
        raise ValueError(f"need num_members >= 1 and grid_size >= 2, got {num_members} "
                         f"and {grid_size}")
    data, prior, env = problem.instance()
    agent_key = jax.random.fold_in(base.problem_keys(problem.key_seed).agent, 0)
    enn, state = _trained(agent, agent_key, data, prior, problem.num_classes)
    axis = np.linspace(-_GRID_LIMIT, _GRID_LIMIT, grid_size)
    grid_x, grid_y = np.meshgrid(axis, axis)
    inputs = jnp.asarray(np.stack([grid_x.ravel(), grid_y.ravel()], axis=-1), jnp.float32)

    def class_1(logits: jax.Array) -> np.ndarray:
        return np.asarray(jax.nn.softmax(logits)[:, 1]).reshape(grid_size, grid_size)

    # One program for every member, not an op-by-op dispatch (a program per op) for each.
    member_logits = jax.jit(lambda state, member_key: enn.apply(
        state, inputs, enn.sample_index(member_key)))
    maps = [("environment", class_1(jax.jit(generative.environment_logits)(env, inputs)))]
    for i, member_key in enumerate(jax.random.split(key, num_members)):
        maps.append((f"sampled member {i + 1}", class_1(member_logits(state, member_key))))

    figure = new_figure((_PANEL_FIGURE_5 * len(maps) + 1, 4))
    axes = figure.subplots(1, len(maps), sharey=True)
    x, y = np.asarray(data.x), np.asarray(data.y)
    others = "y = 0" if problem.num_classes == 2 else "y != 1"
    markers = ((y != 1, "white", "black", others), (y == 1, "black", "white", "y = 1"))
    for i, (ax, (title, probs)) in enumerate(zip(axes, maps)):
        image = ax.pcolormesh(grid_x, grid_y, probs, cmap="RdBu_r", vmin=0, vmax=1,
                              shading="auto")
        if probs.min() < 0.5 < probs.max():
            ax.contour(grid_x, grid_y, probs, levels=[0.5], colors="black", linewidths=1.2)
        for chosen, face, edge, label in markers:
            ax.scatter(x[chosen, 0], x[chosen, 1], s=18 if i == 0 else 12, c=face,
                       edgecolors=edge, linewidths=0.6, label=label)
        ax.set_xlim(-_GRID_LIMIT, _GRID_LIMIT)
        ax.set_ylim(-_GRID_LIMIT, _GRID_LIMIT)
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("x_1")
    axes[0].set_ylabel("x_2")
    axes[0].legend(fontsize=7, loc="lower left", title="training data", title_fontsize=7)
    figure.colorbar(image, ax=axes, label="P(y = 1 | x)", shrink=0.9)
    where = panels.title(panels.panel(problem.stratum_columns))
    figure.suptitle(f"{problem.problem_id}: {where}, "
                    f"T = {problem.num_train}; black line: decision boundary P = 0.5",
                    fontsize=10)
    return save_figure(figure, path)
