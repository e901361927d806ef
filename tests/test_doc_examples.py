"""The code examples of the README and the site, as a reader meets them.

- The tutorial (docs/tutorial.md) runs from an empty directory, block by block: a
  ``python title="FILE"`` block is saved as FILE, a ``sh`` block's command runs through
  the command's entry point (``cli.main``, as the site's other pages do, with training
  shortened), a plain ``python`` block runs in its own interpreter.
- Every other Python example runs (those that run for long with a user's XLA settings,
  not the suite's faster-compiling ones), as a script in this process, in a directory whose
  results store holds rows of mlp, ensemble+ and the reader's own model ``mine`` on the
  paper sweep (as after `neural-testbed run` of each, and `score`; made up here, as an
  example reads whatever its reader computed), or is run by the test named in
  ``COVERED`` that also checks what it computes.
- Every shell command is one the command line accepts: ``neural-testbed`` lines are
  parsed by its own parser (a renamed flag, a removed command or a choice that no longer
  exists fails), their agents are registered (or come with ``--import``) and their
  problem ids exist; ``pip install`` names extras that ``pyproject.toml`` has; the set-up
  lines are the README's two commands.
- And every ``neural-testbed`` line runs: those that take seconds (listing agents and
  problems, ``--help``, the published leaderboard); those that read the rows of the paper
  sweep or its subsets (``leaderboard``, ``compare``, ``plot``, ``export``, ``report``,
  ``correlate``), in a copy of the directory above; the rest, which compute, run in
  tests/test_doc_pages_compute.py.
"""

import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from neural_testbed import agents, cli, leaderboard
from neural_testbed.leaderboard import store as store_lib
from neural_testbed.run import rows as run_rows

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)

# Python examples run by a test that also checks their result: a fragment of the block ->
# the test.
COVERED = {
    "leaderboard.run_agent(functools.partial(spec.make, spec.default)":
        "tests/test_docs.py::test_the_readmes_python_quickstart_runs_as_written",
    "class TorchDropoutConfig":
        "tests/agents/test_torch_example.py (examples/torch_dropout.py; needs torch)",
}
# The commands that build agents (the others read agents' rows from a store).
TRAINING = ("run", "sweep", "reproduce", "diagnose", "probe", "tal", "xll")
# Examples that train or evaluate at N = M = 1000: seconds to a minute each.
SLOW = ("evaluation.evaluate_sampler(", "leaderboard.run_agent(", "arrays.score_predictions(")
SET_UP = {  # the README's two commands, which .ci/run and a fresh clone run
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/neural-testbed run "
    "--agent mlp",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m "
    "pytest -q",
}


def blocks(page: pathlib.Path) -> list[tuple[str, str | None, str]]:
    """The page's fenced code blocks: (language, title or None, code)."""
    found = []
    for lang, info, code in FENCE.findall(page.read_text()):
        title = re.search(r'title="([^"]+)"', info)
        found.append((lang, title.group(1) if title else None, code))
    return found


def shell_commands_of(code: str) -> list[str]:
    """Each command of an ``sh`` block, comments dropped, ``&&`` chains split."""
    commands = []
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            head = words.index("&&") if "&&" in words else len(words)
            commands.append(shlex.join(words[:head]))
            words = words[head + 1:]
    return [c for c in commands if c]


def shell_commands(page: pathlib.Path) -> list[str]:
    """Each command of the page's ``sh`` blocks (:func:`shell_commands_of`)."""
    return [c for lang, _, code in blocks(page) if lang == "sh" for c in shell_commands_of(code)]


def _python(code: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """Runs ``code`` in its own interpreter, with the suite's compile settings (conftest.py;
    tests/test_users_programs.py compiles as users do): the examples' time is compiling."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow  # trains two agents on the smoke sweep and draws the figures
def test_the_tutorial_runs_from_an_empty_directory(tmp_path, monkeypatch, capsys,
                                                   short_training, own_imports):
    """Block by block, in one directory: each ``sh`` line through the command's own entry
    point in this process (the agents train at most 10 steps: ``short_training``; rows keep
    their configs' hashes, so `compare` and `plot` find them), the plain ``python`` block
    in its own interpreter, as a reader runs it."""
    monkeypatch.chdir(tmp_path)
    short_training(monkeypatch)
    outputs = []
    for lang, title, code in blocks(TUTORIAL):
        if title:
            (tmp_path / title).write_text(code)
        elif lang == "python":
            done = _python(code, tmp_path)
            assert done.returncode == 0, (code, done.stdout[-2000:], done.stderr[-2000:])
            outputs.append(done.stdout)
        else:
            (command,) = shell_commands_of(code)
            status = cli.main(shlex.split(command)[1:])
            out, err = capsys.readouterr()
            assert status == 0, (command, out[-2000:], err[-2000:])
            outputs.append(out)
    run_mlp, run_mine, compared, from_python, plotted = outputs
    assert "aggregate (stratified ± se): d_KL^1 = " in run_mlp and "4 problems" in run_mine
    assert re.search(r"ensemble\+\s+published\s+100\s", compared)  # the published baseline
    assert "ensemble+" in from_python and "published" in from_python
    assert (tmp_path / "figures" / "figure2.png").stat().st_size > 10_000, plotted


def _python_examples():
    for page in PAGES:
        for i, (lang, title, code) in enumerate(blocks(page)):
            if lang == "python" and not title and page != TUTORIAL:
                slow = [pytest.mark.slow] if any(f in code for f in SLOW) else []
                yield pytest.param(page, code, id=f"{page.name}-{i}", marks=slow)


@pytest.fixture(scope="module")
def a_readers_store(tmp_path_factory) -> pathlib.Path:
    """A directory whose default store holds rows of mlp and ensemble+ (default configs)
    on every paper problem, ensemble+'s KL a fifth lower (the Python examples add theirs)."""
    return _readers_store(tmp_path_factory.mktemp("reader"))


@pytest.fixture(scope="module")
def a_new_readers_store(tmp_path_factory) -> pathlib.Path:
    """The same, never written by a test: what a command reads does not depend on which
    examples ran before it."""
    return _readers_store(tmp_path_factory.mktemp("new_reader"))


def _readers_store(where: pathlib.Path) -> pathlib.Path:
    _add_readers_rows(where, "paper")
    return where


def _add_readers_rows(where: pathlib.Path, sweep: str) -> None:
    """Rows of mlp and ensemble+ (default configs) and of the reader's own model ``mine``
    (scored from arrays) on every problem of ``sweep``, in the directory's default store,
    ensemble+'s KL a fifth lower than mlp's, mine's a tenth."""
    rows = []
    for name, level in (("mlp", 1.0), ("ensemble+", 0.8), ("mine", 0.9)):
        config = agents.get_agent(name).default if name in agents.AGENTS else None
        for i, problem in enumerate(leaderboard.get_sweep(sweep).values()):
            for tau in problem.taus:
                rows.append(run_rows.result_row(
                    name, store_lib.config_hash(name, config), store_lib.config_json(config),
                    problem, tau, "auto", 0, estimate=level * tau * (1 + i % 7) / 10,
                    estimate_stderr=0.01, num_clipped=0, accuracy=0.9, ece=0.05,
                    train_seconds=1.0, compile_seconds=0.1, eval_seconds=0.5))
    with store_lib.ResultsStore(str(where / store_lib.DEFAULT_DB)) as store:
        store.write(rows)


@pytest.mark.parametrize("page, code", list(_python_examples()))
@pytest.mark.usefixtures("own_imports")  # an agent an example registers is gone after it
def test_every_python_example_runs(page, code, a_readers_store, monkeypatch):
    """As a script, in this process (a new interpreter per example only adds its start-up),
    in the reader's directory."""
    covered = [test for fragment, test in COVERED.items() if fragment in code]
    if covered:
        assert (ROOT / covered[0].split("::")[0].split(" ")[0]).exists(), covered
        return
    monkeypatch.chdir(a_readers_store)
    exec(compile(code, f"<{page.name} example>", "exec"), {"__name__": "__main__"})


def _commands():
    """Each distinct command once, named by the first page that shows it (the README and
    a docs page often show the same line: running it twice checks nothing more)."""
    seen = set()
    for page in PAGES:
        for command in shell_commands(page):
            if command not in seen:
                seen.add(command)
                yield pytest.param(command, id=f"{page.name}: {command}"[:120])


def _parsed(command: str):
    """The parsed arguments of a `neural-testbed` line (None for --help), or a failure
    naming the line."""
    try:
        return cli.build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exit_:
        if exit_.code == 0 and "--help" in command:
            return None
        pytest.fail(f"the command line refuses {command!r}")


@pytest.mark.parametrize("command", list(_commands()))
def test_every_shell_command_is_one_the_command_line_accepts(command, capsys):
    words = shlex.split(command)
    if words[0] == "python3" or ".venv/bin/" in command:
        assert any(command in line for line in SET_UP), command
    elif words[:2] == ["pip", "install"]:
        extras = re.findall(r"\[([\w,-]+)\]", command)
        pyproject = (ROOT / "pyproject.toml").read_text()
        for extra in ",".join(extras).split(","):
            assert re.search(rf"^{re.escape(extra)} = \[", pyproject, re.M), (extra, command)
    elif words[:1] == ["mkdocs"]:
        assert words[1] in ("serve", "build"), command
    else:
        assert words[0] == "neural-testbed", f"a shell example this test does not know: {command}"
        args = _parsed(command)
        capsys.readouterr()
        if args is None:
            return
        names = getattr(args, "agent", None)  # an agent trained must be registered (one
        if args.command in TRAINING and not getattr(args, "imports", None):  # compared is
            for name in names if isinstance(names, list) else [names]:  # read from a store)
                assert name is None or name in agents.AGENTS, (name, command)
        named = [w for flag, w in zip(words, words[1:]) if flag in ("--problem", "--problems")]
        for problem in [p for p in named if "/" in p]:  # an id, not a count
            assert any(problem in leaderboard.get_sweep(sweep) for sweep in
                       ("paper", "regression", "regression-wang")), (problem, command)


def _quick(command: str) -> bool:
    words = shlex.split(command)
    return words[0] == "neural-testbed" and (
        words[1] in ("agents", "problems") or "--help" in words
        or (words[1] == "leaderboard" and "--with-baselines" in words and "--import" not in words))


@pytest.mark.parametrize("command", [c for c in _commands() if _quick(c.values[0])])
def test_the_quick_shell_commands_run(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no store here: what needs none must work without
    words = shlex.split(command)[1:]
    try:
        status = cli.main(words)
    except SystemExit as exit_:  # --help
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 0, (command, err)
    assert out.strip(), command


READERS = ("leaderboard", "compare", "plot", "export", "report", "correlate")  # train nothing


def _reads_the_paper_rows(command: str) -> bool:
    """A command that only reads rows, of agents the reader's store holds (mlp, ensemble+
    and mine; ensemble's come from the published table) on the sweep it holds them on (paper, or its subsets quick and smoke; for
    `correlate`, also real), or the published rows alone."""
    words = shlex.split(command)
    sweep = words[words.index("--sweep") + 1] if "--sweep" in words else None
    agents_named = [w for flag, w in zip(words, words[1:]) if flag in ("--agent", "--baseline")]
    return (words[0] == "neural-testbed" and words[1] in READERS and not _quick(command)
            and "--import" not in words and sweep in ("paper", "quick", "smoke", None)
            and all(a in ("mlp", "ensemble+", "ensemble", "mine") for a in agents_named))


@pytest.mark.slow  # each reads the published table beside the store
@pytest.mark.parametrize("command", [c for c in _commands() if _reads_the_paper_rows(c.values[0])])
def test_the_shell_commands_that_read_the_paper_sweeps_rows_run(command, a_new_readers_store,
                                                                tmp_path, monkeypatch, capsys,
                                                                short_training):
    where = tmp_path / "reader"
    shutil.copytree(a_new_readers_store, where)  # what one command writes, no other sees
    words = shlex.split(command)
    if "--real-sweep" in words:  # correlate: the agents' rows on a real sweep too
        _add_readers_rows(where, words[words.index("--real-sweep") + 1])
    if words[1] == "report" and "--sweep" not in words:  # every sweep's published board:
        words += ["--sweep", "paper"]  # the docs build writes them (test_docs.py), as report does
    monkeypatch.chdir(where)
    short_training(monkeypatch)  # `plot --agent` trains the agent for Figure 5
    status = cli.main(words[1:])
    out, err = capsys.readouterr()
    assert status == 0, (command, out[-1500:], err[-1500:])
