"""The paper's figures: each a valid PNG of its size, from a small hand-made results table."""

from __future__ import annotations

import dataclasses
import struct

import jax
import matplotlib
import numpy as np
import pytest

from neural_testbed import agents, base, leaderboard
from neural_testbed.agents import registry
from neural_testbed.figures import canvas
from neural_testbed.figures import leaderboard as figures
from neural_testbed.leaderboard import scoring
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

# 2 temperatures x 2 T x 2 seeds of the paper sweep: 8 problems.
PROBLEMS = {
    pid: p for pid, p in leaderboard.get_sweep("paper").items()
    if p.temperature in (0.01, 0.5) and p.num_train in (10, 100) and p.seed < 2
}


def _row(agent, config_hash, problem, tau, kl, seconds=0.5, status="ok", config=None):
    """A stored row whose d_KL (or NLL, on real data) is ``kl``."""
    row = run_rows.result_row(
        agent, config_hash, config or f'{{"id":"{config_hash}"}}', problem, tau, "auto", 0,
        estimate=kl, estimate_stderr=0.01 * kl, num_clipped=0, accuracy=0.8, ece=0.05,
        train_seconds=seconds, compile_seconds=0.0, eval_seconds=seconds / 10, status=status,
        error="" if status == "ok" else "boom")
    return store_lib.StoredRow(**row.as_dict(), version="0.1.0", timestamp="2024-01-01T00:00:00")


def _rows(with_mlp=True):
    """mlp (2 configs), ensemble (2 configs), dropout (1 config, missing one problem)."""
    agent_scale = {"ensemble": 0.6, "dropout": 1.4}
    if with_mlp:
        agent_scale["mlp"] = 1.0
    rows = []
    for agent, scale in agent_scale.items():
        for c, (config_scale, seconds) in enumerate([(1.0, 0.2), (1.2, 2.0)]):
            if agent == "dropout" and c:
                continue
            for i, p in enumerate(PROBLEMS.values()):
                if agent == "dropout" and i == 0:
                    continue
                kl = scale * config_scale * (0.1 + p.temperature) * (1 + p.seed) / p.num_train**0.5
                for tau in p.taus:
                    rows.append(_row(agent, f"{agent}{c}", p, tau, kl * (1 + tau / 10), seconds))
    first = next(iter(PROBLEMS.values()))
    rows.append(_row("bbb", "bbb0", first, 1, float("nan"), status="failed"))  # not scored
    return rows


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, chunk = struct.unpack(">I4s", data[8:16])
    assert (length, chunk) == (13, b"IHDR"), "the first chunk is not IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_each_figure_is_a_png_of_its_size(tmp_path):
    rows = _rows()
    backend = matplotlib.get_backend()
    records = scoring.score_agents(rows, PROBLEMS, tuning="per-setting")[0]
    assert figures.figure_normalised_kl(records, tmp_path / "f2.png") == tmp_path / "f2.png"
    assert _png_size(tmp_path / "f2.png") == (2000, 800)
    settings = scoring.kl_by_setting(rows, PROBLEMS)
    for tau in (1, 100):
        path = figures.figure_kl_vs_num_train(settings, tau, tmp_path / f"f_{tau}.png")
        assert _png_size(path) == (2400, 800)
    candidates = scoring.score_candidates(rows, PROBLEMS)
    mlp_kl_100 = next(r["kl_100"] for r in records if r["agent"] == "mlp")
    path = figures.figure_kl_vs_time(candidates, mlp_kl_100, tmp_path / "f10.png")
    assert _png_size(path) == (1400, 1000)
    assert matplotlib.get_backend() == backend  # the user's backend is left alone


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_save_figures_writes_the_four_figures(tmp_path):
    out = tmp_path / "new" / "dir"
    paths = figures.save_figures(_rows(), PROBLEMS, out)
    assert [p.name for p in paths] == ["figure2.png", "figure8.png", "figure9.png", "figure10.png"]
    sizes = [_png_size(p) for p in paths]
    assert sizes == [(2000, 800), (2400, 800), (2400, 800), (1400, 1000)]  # 200 dpi
    assert all(p.parent == out for p in paths)
    for p in paths:  # a vector copy of each, for a paper
        assert p.with_suffix(".pdf").read_bytes().startswith(b"%PDF-")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_without_mlp_results_raw_kl_is_plotted(tmp_path):
    rows = _rows(with_mlp=False)
    records = scoring.score_agents(rows, PROBLEMS, tuning="per-setting")[0]
    assert all(r["kl_1_norm"] != r["kl_1_norm"] for r in records)  # NaN: nothing to normalise by
    assert _png_size(figures.figure_normalised_kl(records, tmp_path / "f2.png")) == (2000, 800)
    assert len(figures.save_figures(rows, PROBLEMS, tmp_path / "out")) == 4


def test_no_usable_rows_is_a_clear_error(tmp_path):
    failed = [r for r in _rows() if r.status == "failed"]
    with pytest.raises(ValueError, match="no ok results"):
        figures.save_figures(failed, PROBLEMS, tmp_path)
    with pytest.raises(ValueError, match="no agent records"):
        figures.figure_normalised_kl([], tmp_path / "f2.png")


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_agent_samples_figure(tmp_path):
    problem = leaderboard.get_sweep("paper")["classification_2d/17"]
    agent = agents.make_mlp_agent(agents.MLPConfig(num_steps=20), base.Shapes.of(problem))
    path = figures.figure_agent_samples(jax.random.key(0), agent, problem, tmp_path / "f5.png",
                                      grid_size=40)
    assert _png_size(path) == (3200, 800)  # 5 panels of 3 inches + 1 for the colour bar


def test_agent_samples_needs_2d_inputs(tmp_path):
    problem = dataclasses.replace(leaderboard.get_sweep("paper")["classification_2d/17"],
                                  input_dim=3)
    agent = agents.make_mlp_agent(agents.MLPConfig(num_steps=20), base.Shapes.of(problem))
    with pytest.raises(ValueError, match="input_dim=3"):
        figures.figure_agent_samples(jax.random.key(0), agent, problem, tmp_path / "f5.png")
    assert not (tmp_path / "f5.png").exists()


@pytest.mark.slow  # among the costliest tests (benchmarks/suite_cpu.py lists them)
def test_prior_functions_figure_divides_by_the_baselines_default_per_problem(tmp_path):
    """Figure 7 on two real datasets: each ensemble+ prior's NLL over mlp's default on the
    same problem. Rows are made so every ratio is known: none 1.0, linear 0.9 at scale 0.1
    and 0.8 at scale 1 (its best), vae 0.5 at scale 3."""
    import json

    from neural_testbed.leaderboard import configs as configs_lib

    real = {pid: p for pid, p in leaderboard.get_sweep("real-quick").items()
            if p.dataset in ("iris", "digits")}
    base_hash = configs_lib.config_hash("mlp", agents.get_agent("mlp").default)
    default = agents.get_agent("ensemble+").default
    rows = []
    for p in real.values():
        for tau in p.taus:
            nll = (1 + p.seed) * tau / p.num_train
            rows.append(_row("mlp", base_hash, p, tau, nll))
            rows.append(_row("mlp", "other", p, tau, 100 * nll))  # not the default: ignored
            for config, ratio in (
                    (dataclasses.replace(default, prior_scale=0.0), 1.0),
                    (dataclasses.replace(default, prior_function="linear", prior_scale=0.1), 0.9),
                    (dataclasses.replace(default, prior_function="linear", prior_scale=1.0), 0.8),
                    (dataclasses.replace(default, prior_function="vae"), 0.5)):
                rows.append(_row("ensemble+", configs_lib.config_hash("ensemble+", config),
                                 p, tau, ratio * nll, config=configs_lib.config_json(config)))
    assert all(r.kl is None for r in rows)  # real data: the NLL is what is divided
    labels = {figures.prior_function_label(json.loads(r.config)) for r in rows
              if r.agent == "ensemble+"}
    assert labels == {"none", "linear", "vae"}
    ratios = figures.prior_function_ratios(rows, real)
    by_dataset = {"iris": (("dataset", "iris"),), "digits": (("dataset", "digits"),)}  # panels
    assert {where for where, _, _, _ in ratios} == set(by_dataset.values())
    expected = {("none", 0.0): 1.0, ("linear", 0.1): 0.9, ("linear", 1.0): 0.8, ("vae", 3.0): 0.5}
    assert {(label, scale) for _, _, label, scale in ratios} == set(expected)
    for (_, _, label, scale), by_t in ratios.items():
        assert all(abs(v - expected[(label, scale)]) < 1e-12
                   for values in by_t.values() for v in values)
        assert all(len(values) == 2 for values in by_t.values())  # 2 seeds per (dataset, T)
    best = figures.best_prior_scales(ratios)
    assert best == {(where, tau, label): scale
                    for where in by_dataset.values() for tau in (1, 100)
                    for label, scale in (("none", 0.0), ("linear", 1.0), ("vae", 3.0))}
    path = figures.figure_prior_functions(rows, real, tmp_path / "f7.png")
    assert _png_size(path) == (2000, 1400)  # 2 taus x 2 datasets
    paths = figures.save_figures(rows, real, tmp_path / "all")
    assert tmp_path / "all" / "figure7.png" in paths
    with pytest.raises(ValueError, match="no problem has ok rows of both ensemble\\+ and mlp"):
        figures.figure_prior_functions([r for r in rows if r.agent != "mlp"], real,
                                     tmp_path / "none.png")


def test_log_axes_are_labelled_in_plain_numbers_below_one():
    """Figure 6b's log axes: ticks at 0.3 ... 40 read "0.3", "1", "20", never "3e-01"."""
    figure = canvas.new_figure((7, 6))
    ax = figure.subplots()
    ax.set_xscale("log")
    ax.set_xlim(0.25, 45)
    ax.xaxis.set_major_formatter(figures._PlainLogFormatter())
    ax.xaxis.set_minor_formatter(figures._PlainLogFormatter(minor_thresholds=(2, 0.5)))
    figure.canvas.draw()
    labels = [t.get_text() for minor in (False, True)
              for t in ax.xaxis.get_ticklabels(minor=minor) if t.get_text()]
    assert {"0.3", "1", "10", "20"} <= set(labels), labels
    assert not any("e" in label for label in labels), labels


# Machado, Oliveira & Fernandes (2009): linear-RGB matrices simulating each dichromacy at
# severity 1.
_VISION = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _lab(colour: str, vision: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour as a viewer of ``vision`` sees it."""
    srgb = np.array(matplotlib.colors.to_rgb(colour))
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ np.clip(vision @ linear, 0, 1)
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize("vision", list(_VISION))
@pytest.mark.parametrize("target", ["classification", "regression"])
def test_agents_that_share_a_figure_stay_apart_for_colour_blind_readers(target, vision):
    """Delta E 1976 of at least 10 between every two built-in agents of one target (a
    figure shows one sweep, of one target), as each dichromacy sees them (about 2.3 is a
    just-noticeable difference; the old palette had mlp and laplace 1.4 apart for a
    deuteranope)."""
    names = [n for n in registry._BUILT_IN if target in agents.get_agent(n).targets]
    colours = figures.agent_colours(names)
    seen = {n: _lab(colours[n], _VISION[vision]) for n in names}
    closest = min((float(np.linalg.norm(seen[a] - seen[b])), a, b)
                  for i, a in enumerate(names) for b in names[i + 1:])
    assert closest[0] >= 10, closest


def test_an_agent_keeps_its_colour_whatever_else_a_figure_holds():
    built_in = registry._BUILT_IN  # not agents.AGENTS: another test may have added to it
    everyone = figures.agent_colours(built_in)
    assert len(set(everyone.values())) == len(built_in)
    # Adding or removing agents (built-in or a user's) leaves the others' colours alone.
    few = figures.agent_colours(["sgmcmc", "mlp"], baseline="mlp")
    assert few == {"sgmcmc": everyone["sgmcmc"], "mlp": "black"}
    mine = figures.agent_colours(["aaa_mine", "hypermodel", "zz_mine"])
    assert mine["hypermodel"] == everyone["hypermodel"]
    assert mine["aaa_mine"] != mine["zz_mine"]
    assert not {mine["aaa_mine"], mine["zz_mine"]} & set(everyone.values())


@pytest.mark.parametrize("computed, kind", [
    ("on a 2-core x86_64 CPU, JAX 0.10.2", "CPU"),
    ("on an NVIDIA H200 machine (16 CPU cores), JAX 0.11.2", "GPU"),
    ("begun on an NVIDIA H200 (16 CPU cores) and continued on a 2-core x86_64 CPU", "mixed"),
    ("this store's rows (the machine is not recorded in a row)", "not recorded"),
])
def test_the_kind_of_machine_is_read_from_where_rows_were_computed(computed, kind):
    """A GPU machine's host cores do not make it a CPU run; Figures 10 and the frontier
    mark points by this kind, so that times are compared within one."""
    assert figures.device_kind(computed) == kind
