"""mkdocs hooks: pages made when the site is built, from what the project already holds,
so that nothing is kept twice.

- The home page is README.md and the changelog page CHANGELOG.md.
- The speed page ends with the latest figures of ``benchmarks/results/*.jsonl``, the
  records the benchmark scripts write (machine, date, versions and command in each).
- ``agents/<name>.md``, one page per registered agent, and ``agents/index.md``: what it
  is, its config (rendered from the config class's docstring), its sweep, and its
  published scores, computed from the shipped table as ``leaderboard --with-baselines``
  computes them, and a link to its own subsection of the differences page (the build fails
  if an agent has none).
- ``published-leaderboard.md``: the leaderboard of each sweep from the shipped table, with
  significance groups, and the whole static site of ``neural-testbed report`` written
  beside the pages (``published-site/index.html``).
"""

import dataclasses
import functools
import inspect
import math
import pathlib
import re

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[1]
_FROM_ROOT = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}
_SWEEPS = ("paper", "real", "regression", "classification")


def on_files(files, config):
    for path, markdown in _agent_pages().items():
        files.append(File.generated(config, path, content=markdown))
    files.append(File.generated(config, "published-leaderboard.md",
                                content=_published_leaderboard()))
    return files


def on_post_build(config, **kwargs):
    from neural_testbed import site

    site.write_site(pathlib.Path(config["site_dir"]) / "published-site", _published_boards(),
                    title="neural-testbed: the published leaderboard")


@functools.cache  # the page and the site show the same boards: scored once a build
def _published_boards():
    from neural_testbed import site
    from neural_testbed.leaderboard import baselines, problems

    published = baselines.load()
    return [site.board([], sweep, problems.get_sweep(sweep), None, published)
            for sweep in _SWEEPS]


def _published_leaderboard() -> str:
    """The published leaderboard of each sweep as Markdown tables."""
    from neural_testbed.leaderboard import scoring

    lines = ["# Published leaderboard", "",
             "Every agent's default config on each sweep, from the table shipped with the "
             "package (generated when this site is built; `neural-testbed leaderboard "
             "--with-baselines --sweep S` prints the same). **group** is the significance "
             "group at each tau: 1 for the agents `neural-testbed compare` does not find worse "
             "than the best at 5%, 2 for those not worse than the best of the rest, and so on. "
             "The same as a sortable site with a page per agent and the figures: "
             '<a href="../published-site/index.html">the published site</a> (`neural-testbed '
             "report --out DIR` writes it, from your own store too).", ""]
    for b in _published_boards():
        metric, taus = b.metric, b.taus
        lines += [f"## {b.sweep}", "", f"{len(b.problems)} problems; normalised by "
                  f"{b.normaliser}.", "",
                  "| group (tau " + "/".join(map(str, taus)) + ") | agent | "
                  + " | ".join(f"{metric}_{t}" for t in taus) + " | "
                  + " | ".join(f"{metric}_{t}_norm" for t in taus) + " | problems |",
                  "|---" * (3 + 2 * len(taus)) + "|"]
        for r in b.records:
            groups = b.groups.get(r["agent"], {})
            lines.append(
                "| " + "/".join(str(groups.get(t, "-")) for t in taus) + f" | {r['agent']} | "
                + " | ".join(scoring.plus_minus(r[f"{metric}_{t}"], r[f"{metric}_{t}_stderr"])
                             for t in taus) + " | "
                + " | ".join(scoring.plus_minus(r[f"{metric}_{t}_norm"],
                                                r[f"{metric}_{t}_norm_stderr"]) for t in taus)
                + f" | {r['problems']} of {r['of']} |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown, page, **kwargs):
    if page.file.src_uri == "speed.md":
        return markdown.rstrip() + "\n\n" + _latest_measurements()
    source = _FROM_ROOT.get(page.file.src_uri)
    if source is None:
        return markdown
    text = (ROOT / source).read_text()
    return text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")


def _latest(path: pathlib.Path, key) -> list[dict]:
    """The newest record of each ``key(record)`` in a results file, in first-seen order."""
    import json

    latest = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            latest[key(record)] = record
    return list(latest.values())


def _latest_measurements() -> str:
    results = ROOT / "benchmarks" / "results"
    lines = ["## Latest measurements", "",
             "Generated from `benchmarks/results/` when the site is built: the newest record "
             "of each kind (each record also names the machine's platform, versions and "
             "command).", "",
             "### Run-path mechanisms (`benchmarks/mechanisms.py`)", "",
             "| agent | sweep | variant | cold s | warm s (median) | date | cores |",
             "|---|---|---|---|---|---|---|"]
    for r in _latest(results / "mechanisms.jsonl",
                     lambda r: (r["agent"], r["sweep"], r["variant"])):
        warm = r["warm_median_wall_s"]
        lines.append(f"| {r['agent']} | {r['sweep']} | {r['variant']} | {r['cold_wall_s']} | "
                     f"{'n/a' if warm is None else round(warm, 2)} | {r['date'][:10]} | "
                     f"{r['machine'].get('usable_cores', '')} |")
    lines += ["", "### What each program costs to compile (`benchmarks/program_costs.py`)", ""]
    for r in _latest(results / "program_costs.jsonl", lambda r: (r["agent"], r["sweep"])):
        lines += [f"{r['agent']} on {r['sweep']}, no compilation cache, {r['date'][:10]}: "
                  f"{r['wall_s']} s, {r['compiling_s']} s of it compiling.", "",
                  "| program | batch | trace s | lower s | compile s | HLO lines |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {p['program']} | {p['batch']} | {p['trace_s']} | {p['lower_s']} | "
                  f"{p['compile_s']} | {p['hlo_lines']} |" for p in r["programs"]]
        lines.append("")
    lines += ["### The unrolled threefry hash (`benchmarks/threefry.py`)", "",
              "| program | threefry s | unrolled s | speed-up | date |", "|---|---|---|---|---|"]
    for r in _latest(results / "threefry.jsonl", lambda r: r["steps"]):
        lines += [f"| {name} | {t['threefry_s']} | {t['unrolled_s']} | {t['speed_up']}x | "
                  f"{r['date'][:10]} |" for name, t in r["timings"].items()]
    lines += ["", "### A PyTorch host agent's threads (`benchmarks/host_threads.py`)", "",
              "| torch threads | beside a JAX program | training s | date | cores |",
              "|---|---|---|---|---|"]
    for r in _latest(results / "host_threads.jsonl", lambda r: (r["threads"], r["beside_jax"])):
        lines.append(f"| {r['threads']} ({r['torch_threads']}) | "
                     f"{'yes' if r['beside_jax'] else 'no'} | {r['train_s']} | "
                     f"{r['date'][:10]} | {r['machine'].get('usable_cores', '')} |")
    lines += ["", "### Each agent on the `classification` sweep "
              "(`benchmarks/classification_sweep.py`)", "",
              "One problem of each (d, T) cell, default config, a fresh process each; the "
              "whole sweep estimated as one compilation and 15 problems per cell.", "",
              "| agent | whole sweep, estimated | slowest cell | its wall s | peak memory MB "
              "| cells run | date | cores |", "|---|---|---|---|---|---|---|---|"]
    for r in _latest(results / "classification_sweep.jsonl", lambda r: r["agent"]):
        ran = [c for c in r["cells"] if c["status"] == ["ok"]]
        slowest = max(r["cells"], key=lambda c: c.get("wall_s") or 0)
        estimate = (f"{r['sweep_estimate_s'] / 60:.0f} min" if r["sweep_estimate_s"] is not None
                    else f"over {r['estimate_of_cells_that_ran_s'] / 60:.0f} min")
        lines.append(f"| {r['agent']} | {estimate} | d = {slowest['input_dim']}, T = "
                     f"{slowest['num_train']} ({', '.join(slowest['status'])}) | "
                     f"{slowest.get('wall_s')} | "
                     f"{max((c.get('peak_rss_mb') or 0) for c in r['cells'])} | "
                     f"{len(ran)} of {len(r['cells'])} | {r['date'][:10]} | "
                     f"{r['machine'].get('usable_cores', '')} |")
    return "\n".join(lines) + "\n"


def _published_scores() -> dict[str, dict[str, dict]]:
    """sweep -> agent -> its leaderboard record from the published rows alone."""
    from neural_testbed.agents import registry
    from neural_testbed.leaderboard import baselines, problems, scoring

    published = baselines.load()
    scores = {}
    for sweep in _SWEEPS:
        sweep_problems = problems.get_sweep(sweep)
        rows, _ = baselines.rows_for(published, registry.AGENTS, sweep_problems)
        if rows:
            normaliser = scoring.default_normaliser(sweep_problems)
            records, _ = scoring.score_agents(rows, sweep_problems, baseline=normaliser)
            taus = sorted({t for p in sweep_problems.values() for t in p.taus})
            scores[sweep] = {r["agent"]: dict(r, taus=(taus[0], taus[-1]),
                                              normaliser=normaliser) for r in records}
    return scores


def _field_comments(config_type) -> dict[str, str]:
    """What each field of a config class means: the comment after it in the source, or
    the comment lines just above it."""
    comments = {}
    for klass in reversed(config_type.__mro__[:-1]):  # a subclass's comment wins
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in source.splitlines():
            stripped = line.strip()
            field = re.match(r"(\w+): [^#]*?(?:#\s*(.+))?$", stripped)
            if stripped.startswith("#"):
                above.append(stripped.lstrip("# "))
                continue
            if field and "=" in stripped:
                text = field.group(2) or " ".join(above)
                if text:
                    comments[field.group(1)] = text.strip()
            above = []
    return comments


def _fields_table(default) -> list[str]:
    comments = _field_comments(type(default))
    rows = ["| field | default | what it is |", "|---|---|---|"]
    for field in dataclasses.fields(default):
        meaning = comments.get(field.name, "").replace("|", "\\|")
        rows.append(f"| `{field.name}` | `{getattr(default, field.name)!r}` | {meaning} |")
    return rows


def _in_order(values: list) -> list:
    """Sorted where the values compare (numbers), else in the sweep's order."""
    try:
        return sorted(values)
    except TypeError:
        return values


def _number(mean: float, stderr: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:.4g} ± {stderr:.2g}"


def _agent_page(name, spec, scores) -> str:
    anchor = differences_anchor(name)
    config_type = type(spec.default)
    sweep = spec.sweep()
    varied = {f.name: _in_order(list(dict.fromkeys(getattr(c, f.name) for c in sweep)))
              for f in dataclasses.fields(config_type)}
    varied = {k: [repr(v) for v in values] for k, values in varied.items() if len(values) > 1}
    lines = [f"# `{name}`", "", spec.description[0].upper() + spec.description[1:] + ".", "",
             f"Problems it is built for: {', '.join(spec.targets)}. Run it with "
             f"`neural-testbed run --agent {name}`, its sweep with "
             f"`neural-testbed sweep --agent {name}`.", "", "## Config", "",
             f"`{config_type.__module__}.{config_type.__qualname__}`: "
             f"{(inspect.getdoc(config_type) or '').splitlines()[0]}", "",
             *_fields_table(spec.default), "",
             "## Sweep", "", f"{len(sweep)} configs"
             + (", varying " + "; ".join(f"`{k}` over {', '.join(v)}" for k, v in varied.items())
                if varied else "") + ".", ""]
    if spec.batchable:
        lines += [f"Configs that differ only in {', '.join(f'`{b}`' for b in spec.batchable)} "
                  "are trained together in one vmapped program.", ""]
    lines += ["## Published scores", ""]
    table = [(sweep_name, records[name]) for sweep_name, records in scores.items()
             if name in records]
    if table:
        lines += ["The default config on each sweep, from the shipped table (`leaderboard "
                  "--with-baselines`), at the sweep's smallest and largest tau; normalised "
                  "by the sweep's default baseline (mlp's, uniform's on `classification`).",
                  "", "| sweep | metric | small tau | large tau | normalised by | "
                  "normalised, small tau | normalised, large tau | problems |",
                  "|---|---|---|---|---|---|---|---|"]
        for sweep_name, r in table:
            m, (small, large) = r["metric"], r["taus"]
            lines.append(f"| {sweep_name} | {'d_KL' if m == 'kl' else 'NLL'} | "
                         f"{small}: {_number(r[f'{m}_{small}'], r[f'{m}_{small}_stderr'])} | "
                         f"{large}: {_number(r[f'{m}_{large}'], r[f'{m}_{large}_stderr'])} | "
                         f"{r['normaliser']} | "
                         f"{_number(r[f'{m}_{small}_norm'], r[f'{m}_{small}_norm_stderr'])} | "
                         f"{_number(r[f'{m}_{large}_norm'], r[f'{m}_{large}_norm_stderr'])} | "
                         f"{r['problems']} of {r['of']} |")
    else:
        lines.append("No published rows.")
    lines += ["", "## Differences from the paper", "",
              "How this agent differs from the paper and the reference: "
              f"[its entry on the differences page](../differences.md#{anchor}).", ""]
    return "\n".join(lines)


def differences_anchor(name: str) -> str:
    """The anchor of an agent's subsection on the differences page: ``ensemble+`` ->
    ``agent-ensemble-plus``, ``oracle_gp`` -> ``agent-oracle-gp``."""
    return "agent-" + name.replace("+", "-plus").replace("_", "-")


def _check_differences_anchors(names) -> None:
    """Every agent has its subsection, ``### NAME {#agent-SLUG}``, on the differences page,
    so that no agent ships without saying how it differs from the paper."""
    from mkdocs.exceptions import PluginError

    text = (ROOT / "docs" / "differences.md").read_text()
    present = set(re.findall(r"^#+ .*\{#([\w-]+)\}\s*$", text, flags=re.M))
    missing = [f"{name} (#{differences_anchor(name)})" for name in names
               if differences_anchor(name) not in present]
    if missing:
        raise PluginError(
            "docs/differences.md has no subsection for the agent(s) " + ", ".join(missing)
            + ": add a heading '### NAME {#agent-SLUG}' under 'Agents' saying how each "
            "differs from the paper and the reference (or that the comparison has not been "
            "made).")


def _agent_pages() -> dict[str, str]:
    from neural_testbed.agents import registry

    _check_differences_anchors(registry.AGENTS)
    scores = _published_scores()
    pages = {f"agents/{name}.md": _agent_page(name, spec, scores)
             for name, spec in registry.AGENTS.items()}
    index = ["# Agents", "", "One page per registered agent: what it is, its config, its "
             "sweep and its published scores.", "", "| agent | what it is | problems |",
             "|---|---|---|"]
    index += [f"| [`{name}`]({name}.md) | {spec.description} | {', '.join(spec.targets)} |"
              for name, spec in registry.AGENTS.items()]
    pages["agents/index.md"] = "\n".join(index) + "\n"
    return pages
