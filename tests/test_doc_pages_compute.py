"""Each page's commands that compute, run as a reader runs them: page by page, in the
page's order, in one directory, each narrowed by its own flags to one problem at tau 1
(or one round), with the page's titled files (``my_agent.py``) and the reader's own data
(``my.npz``, ``my.csv``) written first. tests/test_doc_examples.py parses every line and
runs those that read stored rows; this file is apart from it so that the two share the
test processes (a test file runs in one process).

The registered agents train for at most 10 steps here (conftest.py's ``short_training``):
a default ensemble+ trains 100 members for 1,000 steps and the cnp meta-trains for
10,000, minutes of the suite for lines whose numbers no one reads here. The programs
are the ones users run, with shorter loops; the agents' own tests check what training
gives.

Left out: the lines in ``NOT_RUN`` (a cluster of the reader's), and those in
``RUN_ELSEWHERE`` (Ray and worker processes), which the named test runs through the
same executor, checking its rows.
"""

import glob
import importlib.util
import os
import pathlib
import shlex
import shutil

import numpy as np
import pytest

from neural_testbed import cli, leaderboard
from neural_testbed.cli import options


def _doc_examples():
    """tests/test_doc_examples.py's page readers (a test module is not importable by name)."""
    path = pathlib.Path(__file__).with_name("test_doc_examples.py")
    spec = importlib.util.spec_from_file_location("doc_examples_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_pages = _doc_examples()
ROOT, PAGES, TUTORIAL = _pages.ROOT, _pages.PAGES, _pages.TUTORIAL
blocks, shell_commands = _pages.blocks, _pages.shell_commands


# Documented commands that no test runs, and why (tests/test_doc_examples.py parses them).
NOT_RUN = {"--address": "joins the reader's own Ray cluster"}
# Documented commands that another test runs through the same executor, checking its rows:
# a flag of the command -> that test.
RUN_ELSEWHERE = {
    "--backend": "tests/leaderboard/test_scale_out.py::test_ray_backend_listens_on_loopback_only_"
                 "survives_a_killed_worker_and_gives_the_plain_rows",
    "--workers": "tests/leaderboard/test_scale_out.py::test_two_local_workers_give_the_plain_rows",
}


def _set(words: list[str], flag: str, *values: str) -> list[str]:
    """``words`` with ``flag`` given ``values`` (replacing a value it had)."""
    if flag in words:
        at = words.index(flag)
        words = words[:at] + words[at + 2:]
    return [*words, flag, *values]


def _on_one_problem(command: str, where: pathlib.Path) -> list[str]:
    """The command's words (a glob expanded in ``where``, as the shell does), narrowed by
    its own flags to one problem (a shard of N to the sweep's first N) at tau 1 (or the
    first of the taus it names), or to one round: at full size each computes for minutes
    to hours, and what is under test here is that every documented line runs as written;
    the commands' own tests check numbers (tests/test_cli.py's `diagnose` at four taus)."""
    words = [expanded for word in shlex.split(command)[1:] for expanded in (
        sorted(os.path.basename(f) for f in glob.glob(str(where / word))) if "*" in word
        else [word])]
    args = cli.build_parser().parse_args(words)
    if args.command == "reproduce":
        return _set(words, "--problems", "1")
    if args.command == "tal":
        return _set(_set(words, "--problems", "1"), "--rounds", "1")
    if args.command == "probe":  # one problem, trained once with one more pair
        words = words if args.problems else [
            *words, "--problems", next(iter(leaderboard.get_sweep(args.sweep)))]
        return words if "--reduction-k" in words else [*words, "--reduction-k", "1"]
    if args.command == "bandit":  # two seeds of a short run, trained twice
        return _set(_set(_set(words, "--seeds", "2"), "--steps", "60"), "--retrain-every", "30")
    if args.command == "active":  # two seeds, trained three times
        return _set(_set(_set(words, "--seeds", "2"), "--steps", "41"), "--batch-size", "20")
    if args.command == "correlate-decisions":  # both tasks, two seeds, short; the agents
        # are the two trivial ones (fast to compile) and mlp: each agent is three programs
        words = _set(_set(_set(words, "--seeds", "2"), "--steps", "12"), "--retrain-every", "6")
        words = _set(_set(_set(words, "--labels", "11"), "--batch-size", "5"),
                     "--num-bootstrap", "20")
        return _set(words, "--agent", "uniform,average_class_probs,mlp")
    if args.command == "diagnose":  # one problem already
        return _set(words, "--taus", args.taus.split(",")[0] if args.taus else "1")
    if not hasattr(args, "problem_ids"):
        return words
    if not args.problem_ids:
        try:
            ids = list(options.sweep_problems(args))
        except ValueError:  # the command refuses its problems: let it say so, as it runs
            return words
        share = int(args.shard.split("/")[1]) if getattr(args, "shard", None) else 1
        words = [*words, "--problems", *ids[:share]]
    taus = getattr(args, "taus", "given")
    if taus == "given":  # the command takes no taus
        return words
    return _set(words, "--taus", "1" if taus is None else taus.split(",")[0])


def _computing_commands(page: pathlib.Path) -> list[str]:
    """The page's commands that tests/test_doc_examples.py does not run: those that compute
    results, and those that read what they computed."""
    return [c for c in shell_commands(page) if shlex.split(c)[0] == "neural-testbed"
            and not _pages._quick(c) and not _pages._reads_the_paper_rows(c)]


def _readers_data(where: pathlib.Path) -> None:
    """``my.npz`` and ``my.csv``, the reader's own data that the real-data page names: three
    classes of 4-feature Gaussian blobs, 90 rows for training and 30 for testing."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    x = rng.normal(y[:, None], 1.0, (120, 4)).astype(np.float32)
    order = rng.permutation(120)
    train, test = order[:90], order[90:]
    np.savez(where / "my.npz", x_train=x[train], y_train=y[train], x_test=x[test],
             y_test=y[test])
    header = "x0,x1,x2,x3,y"
    np.savetxt(where / "my.csv", np.column_stack([x, y]), delimiter=",", header=header,
               comments="", fmt=["%.5f"] * 4 + ["%d"])


def _know_nothing(inputs: pathlib.Path, predictions: pathlib.Path) -> None:
    """A model's predictions files for the arrays files in ``inputs``, as `inputs --help`
    describes them: uniform class probabilities at every input."""
    predictions.mkdir(exist_ok=True)
    for path in inputs.glob("*.npz"):
        with np.load(path) as given:
            m, k = int(given["num_samples"]), int(given["num_classes"])
            probs = {f"probs_{name[2:]}": np.full((x.shape[0], m, x.shape[1], k), 1 / k,
                                                  np.float32)
                     for name, x in given.items() if name.startswith("x_tau")}
        np.savez(predictions / path.name, **probs)


def _pages_with_computing_commands():
    for page in PAGES:
        if page != TUTORIAL and _computing_commands(page):  # the tutorial has its own test
            yield pytest.param(page, id=page.name)


@pytest.mark.slow  # each page's agents trained on one problem
@pytest.mark.parametrize("page", list(_pages_with_computing_commands()))
def test_each_pages_computing_commands_run_in_order_on_one_problem(page, tmp_path, monkeypatch,
                                                                    capsys, short_training,
                                                                    own_imports):
    """In one directory, as a reader who runs the page top to bottom in a clone of the
    repository: its titled code blocks saved as their files first, the repository's
    files that its lines import (``--import examples/torch_dropout.py``) in their places,
    and the reader's own data files; before `score`, the reader's model (one that knows
    nothing) predicts at the arrays `inputs` wrote."""
    for _, title, code in blocks(page):
        if title:
            (tmp_path / title).write_text(code)
    commands = _computing_commands(page)
    for command in commands:
        words = shlex.split(command)
        for flag, path in zip(words, words[1:]):
            if flag == "--import" and "/" in path and (ROOT / path).is_file():
                (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / path, tmp_path / path)
    _readers_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    inputs_dir = None  # where the page's `inputs` wrote the arrays
    for command in commands:
        flags = set(shlex.split(command))
        if flags & (set(NOT_RUN) | set(RUN_ELSEWHERE)):
            elsewhere = [RUN_ELSEWHERE[f] for f in flags & set(RUN_ELSEWHERE)]
            for test in elsewhere:
                path, name = test.split("::")
                assert f"def {name}(" in (ROOT / path).read_text(), test
            continue
        if "torch_dropout" in command and importlib.util.find_spec("torch") is None:
            continue  # tests/agents/test_torch_example.py says it is skipped
        words = _on_one_problem(command, tmp_path)
        if words[0] == "score":
            _know_nothing(inputs_dir, tmp_path / words[words.index("--predictions") + 1])
        if words[0] == "inputs":
            inputs_dir = tmp_path / words[words.index("--out") + 1]
        with monkeypatch.context() as patch:
            if words[0] != "reproduce":  # which checks the published rows' numbers
                short_training(patch)
            status = cli.main(words)
        out, err = capsys.readouterr()
        assert status == 0, (command, words, out[-1500:], err[-1500:])
