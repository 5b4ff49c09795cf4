"""bench.cost_model's choice metrics (how a cost model chooses among the alternatives for the same
values) against a brute-force count over every pair and group."""

import itertools

import numpy as np

from bench.cost_model import choices


def test_choices_match_brute_force():
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 12, 80).tolist()
    meas = rng.uniform(1, 10, 80)
    pred = meas * rng.uniform(0.5, 2.0, 80)
    got = choices(pred, meas, groups)
    agree = pairs = right = 0
    regret = []
    for grp in set(groups):
        idx = [i for i, x in enumerate(groups) if x == grp]
        if len(idx) < 2:
            continue
        for i, j in itertools.combinations(idx, 2):
            if pred[i] != pred[j] and meas[i] != meas[j]:
                pairs += 1
                agree += (pred[i] < pred[j]) == (meas[i] < meas[j])
        pick = min(idx, key=lambda i: pred[i])
        right += meas[pick] == min(meas[i] for i in idx)
        regret.append(meas[pick] / min(meas[i] for i in idx))
    assert got["groups"] == len(regret)
    assert got["pairs_right"] == agree / pairs and got["pick_right"] == right / len(regret)
    assert got["regret_median"] == np.median(regret) and got["regret_p90"] == np.quantile(regret, 0.9)
    perfect = choices(meas, meas, groups)
    assert perfect["pairs_right"] == perfect["pick_right"] == perfect["regret_p90"] == 1.0


def test_choices_without_alternatives():
    assert choices(np.ones(3), np.ones(3), ["a", "b", "c"])["groups"] == 0
