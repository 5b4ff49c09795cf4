"""Measuring only what can win (issue 47, orchestrate/learned_pricing.py): compiles store kernel
features beside their prices, a later compile on the same database trains the learned cost model
on them and times only the candidates its plans pick; with every unmeasured candidate priced at a
true lower bound, the plan it ends with is the plan a full tuning finds on the same prices."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import kernorch
from kernorch.orchestrate import learned_pricing
from kernorch.orchestrate.features import FEATURE_NAMES, FEATURES_VERSION
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.tuning_db import FAR_ABOVE_ROOFLINE, Record, TuningDB
from kernorch.runtime import planning

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"
KW = dict(threads=2, progress=False, regions=False, providers=("torch",))
LEARNED = dict(KW, tuning="learned")
# no re-timing of declined fusions and no pricing inside calls: the plan rests on the stored prices alone
EXACT = Knobs(recheck=False, context_rounds=0)


class Block(torch.nn.Module):
    """A model other than the one the database was trained on: convolutions, a residual, a softmax."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)
        self.n = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.relu(self.n(self.c1(x)))
        return torch.softmax(self.c2(y) + y, dim=1).mean((2, 3))


@pytest.fixture(scope="module")
def trained_db(tmp_path_factory) -> Path:
    """A database holding tiny_cnn's prices, compiled with every candidate timed."""
    path = tmp_path_factory.mktemp("learned") / "tuning.sqlite"
    kernorch.compile(str(EXAMPLE), db=str(path), **KW)  # tuning="full": the default
    return path


def _copy(src: Path, dst: Path) -> str:
    shutil.copy(src, dst)
    return str(dst)


def _block():
    torch.manual_seed(0)
    return Block().eval(), torch.randn(1, 3, 12, 12)


def test_compiles_store_features_for_the_prices_training_reads(trained_db):
    db = TuningDB(trained_db)
    row = next(r for r in db.rows() if r.record.ok)
    rows = db.priced_features(row.target, row.version, FEATURES_VERSION)
    assert len(rows) >= 100 and all(len(f) == len(FEATURE_NAMES) for _, f, _, _ in rows)
    # every settled price is a training row (a doubtful one, flagged when the machine was busy, is not: below)
    settled = {r.key for r in db.rows() if r.record.ok and not r.record.doubtful and r.target == row.target}
    assert {k for k, _, _, _ in rows} >= settled
    # a doubtful price, a failure and another version are not training rows
    key = rows[0][0]
    db.put(key, row.target, row.version, Record("torch", 1.0, "ok", flags=FAR_ABOVE_ROOFLINE))
    db.put(key, row.target, row.version, Record("codegen:c", None, "build_failed"))
    left = [(k, p) for k, _, p, _ in db.priced_features(row.target, row.version, FEATURES_VERSION)]
    assert (key, "torch") not in left and (key, "codegen:c") not in left
    assert db.priced_features(row.target, "other-version", FEATURES_VERSION) == []


def test_too_few_prices_time_every_candidate(tmp_path):
    module, x = _block()
    model = kernorch.compile(module, (x,), db=str(tmp_path / "empty.sqlite"), **LEARNED)
    rep = model.report
    assert "every candidate timed" in rep.learned and "holds 0" in rep.learned
    assert rep.predicted == 0 and rep.measured >= rep.candidates


def test_a_trained_database_times_fewer_candidates_and_the_model_stays_correct(trained_db, tmp_path, monkeypatch):
    monkeypatch.setattr(learned_pricing, "MIN_ROWS", 50)
    module, x = _block()
    model = kernorch.compile(module, (x,), db=_copy(trained_db, tmp_path / "db.sqlite"), knobs=EXACT, **LEARNED)
    rep = model.report
    assert rep.learned.startswith("learned cost model:"), rep.learned
    rounds = int(rep.learned.rsplit("; ", 1)[1].split()[0])
    # round LEARNED_ROUNDS + 1 (counted from 1) may still end on a plan of timed kernels; only a plan still picking
    # predicted kernels then has every candidate timed, and one more round solves on those prices
    if rounds <= planning.LEARNED_ROUNDS + 1:  # converged: the candidates not picked were never timed
        assert rep.predicted > rep.candidates // 4 and rep.measured < rep.candidates, (rep.learned, rep.predicted)
        assert f"{rep.predicted} of {rep.candidates} candidates only predicted" in model.summary()
    else:  # timings too noisy to settle (a busy machine): every candidate timed, as a full tuning, and said so
        assert rounds == planning.LEARNED_ROUNDS + 2 and rep.predicted == 0
        assert "only predicted" not in model.summary() and f"{rounds} rounds" in model.summary()
    np.testing.assert_allclose(model(x.numpy()), module(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_priced_at_a_lower_bound_the_learned_plan_is_the_full_tunings(trained_db, tmp_path, monkeypatch):
    monkeypatch.setattr(learned_pricing, "MIN_ROWS", 50)
    real = learned_pricing.train

    def lower_bound(measured, *args, **kwargs):  # every unmeasured candidate at the dispatch overhead alone
        prices, why = real(measured, *args, **kwargs)
        prices.optimism = 0.0
        return prices, why

    monkeypatch.setattr(learned_pricing, "train", lower_bound)
    module, x = _block()
    db = _copy(trained_db, tmp_path / "db.sqlite")
    learned = kernorch.compile(module, (x,), db=db, knobs=EXACT, **LEARNED)
    assert learned.report.predicted > 0  # some candidates never needed a timing
    full = kernorch.compile(module, (x,), db=db, knobs=EXACT, **KW)  # tuning="full" times the rest
    assert full.report.measured > 0 and not full.report.plan_reused
    assert learned.report.priced_s == pytest.approx(full.report.priced_s, rel=1e-6)


def test_an_unknown_tuning_is_refused_by_name():
    with pytest.raises(kernorch.KernorchError, match="unknown tuning 'fast'.*learned, full"):
        kernorch.compile(str(EXAMPLE), tuning="fast", **KW)


def test_merging_databases_copies_the_features_training_needs(trained_db, tmp_path):
    from kernorch.cli import main

    merged = tmp_path / "merged.sqlite"
    assert main(["db", "merge", str(trained_db), "--db", str(merged)]) == 0
    assert sorted(TuningDB(merged).feature_rows()) == sorted(TuningDB(trained_db).feature_rows()) != []
