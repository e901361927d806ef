"""A scikit-learn model scored from arrays: a random forest whose trees are the ensemble.

No callback into JAX: the model sees NumPy arrays only. For each problem of the sweep,
``problem_arrays`` gives the training pairs and each test tau-sample's few distinct
inputs; each tree predicts class probabilities there; ``member_draws`` draws M trees
per tau-sample (an ensemble's belief samples); ``score_predictions`` gives the store
rows a JAX agent would get, and the rows go to the store for `leaderboard` and
`compare`.

Run: python examples/sklearn_forest_arrays.py [--sweep classification-quick] [--db DB]
     [--problems N]  (the first N problems only)
"""

import argparse
import time

import numpy as np
from sklearn.ensemble import RandomForestClassifier

from neural_testbed import leaderboard
from neural_testbed.leaderboard import arrays


def tree_probabilities(forest, x, num_classes):
    """Each tree's class probabilities at x [N, A + 1, d]: [trees, N, A + 1, K] (a class
    the tree never saw gets 0)."""
    flat = x.reshape(-1, x.shape[-1])
    out = np.zeros((len(forest.estimators_), len(flat), num_classes), np.float32)
    for i, tree in enumerate(forest.estimators_):
        out[i][:, forest.classes_] = tree.predict_proba(flat)
    # Truncated to [0.01, 0.99], as the built-in random_forest agent does: no label gets
    # probability 0 (whose log-likelihood would be -inf).
    out = np.clip(out, 0.01, 0.99)
    out /= out.sum(-1, keepdims=True)
    return out.reshape(len(forest.estimators_), *x.shape[:2], num_classes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="classification-quick")
    parser.add_argument("--db", default="neural_testbed_results.db")
    parser.add_argument("--problems", type=int, default=None, help="the first N only")
    args = parser.parse_args(argv)
    problems = list(leaderboard.get_sweep(args.sweep).values())[:args.problems]
    with leaderboard.ResultsStore(args.db) as store:
        for problem in problems:
            given = arrays.problem_arrays(problem)
            start = time.perf_counter()
            forest = RandomForestClassifier(n_estimators=10, random_state=0)
            forest.fit(given.x_train, given.y_train)
            seconds = time.perf_counter() - start
            predictions = {
                tau: arrays.member_draws(tree_probabilities(forest, test.x, given.num_classes),
                                         given.num_samples, seed=tau)
                for tau, test in given.tests.items()}
            rows = arrays.score_predictions(problem, predictions, "sklearn_forest",
                                            train_seconds=seconds)
            store.write(rows)
            print(problem.problem_id, *(f"tau={r.tau}: {r.kl:.4f} ± {r.kl_stderr:.4f}"
                                        for r in rows))


if __name__ == "__main__":
    main()
