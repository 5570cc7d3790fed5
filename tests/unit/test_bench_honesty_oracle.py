"""The honesty benchmark's hindsight bound (``bench/honesty_oracle.py``) against brute force:
the savings the README reads the 40 % target against must be the true optimum."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import bench.bench_honesty as B
from bench.honesty_oracle import fewest_misses_by_size, pooled_bound


def brute_force_bound(fewest: list[np.ndarray], windows: int, n: int, delta: float) -> float:
    best = 0.0
    for ks in itertools.product(range(n + 1), repeat=len(fewest)):
        misses = sum(f[k] for f, k in zip(fewest, ks, strict=True))
        rebuilt = sum((n - k) * windows for k in ks)
        if misses <= delta * rebuilt + 1e-9:
            best = max(best, 1.0 - sum(ks) / (n * len(fewest)))
    return best


def test_the_pooled_bound_is_the_brute_force_optimum() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, folds, windows = int(rng.integers(1, 4)), int(rng.integers(1, 4)), 7
        fewest = []
        for _ in range(folds):  # fewer backups, more misses (not always strictly)
            f = np.sort(rng.integers(0, 3 * windows, n + 1))[::-1].astype(float)
            f[n] = 0.0
            fewest.append(f)
        expected = brute_force_bound(fewest, windows, n, 0.05)
        assert np.isclose(pooled_bound(fewest, windows, n, 0.05), expected)


def test_a_fold_over_delta_may_be_made_up_by_the_others() -> None:
    """Pooled over folds, not per fold: a fold's 1 miss in 7 windows (14 %) passes beside a
    clean fold (1 in 21, 4.8 %), and 2 in 14 beside three clean folds (2 in 56)."""
    n, windows = 2, 7
    bad = np.array([2.0, 1.0, 0.0])  # misses with 0, 1 and 2 backups
    clean = np.array([0.0, 0.0, 0.0])
    assert pooled_bound([bad], windows, n, 0.05) == 0.0  # 1 in 7 or 2 in 14: back up both
    # bad with one backup (1 miss in 7) + clean with none (14): 1 / 21 <= 5 %; 2 / 28 is not
    assert np.isclose(pooled_bound([bad, clean], windows, n, 0.05), (0.5 + 1.0) / 2)
    assert np.isclose(pooled_bound([bad, clean, clean, clean], windows, n, 0.05), 1.0)


def test_fewest_misses_search_every_backup_set() -> None:
    """Two sensors copy each other, a third is independent noise: rebuilding one of the
    pair costs nothing, rebuilding the noise always misses."""
    rng = np.random.default_rng(5)
    a = np.cumsum(rng.normal(0, 1, 400))
    x = np.column_stack([a, a + rng.normal(0, 0.01, 400), rng.normal(0, 5, 400)])
    case = B.Case("t", "none", ("*",), "avg", 4, 0.5, None, "choose")
    fewest = fewest_misses_by_size(x[:300], x[300:], case)
    windows = 100 // 4
    assert fewest[2] == 0 and fewest[3] == 0  # the noise backed up, one of the pair rebuilt
    assert fewest[1] >= windows * 0.5  # one backup: the noise is rebuilt, and misses
    assert fewest[0] > fewest[1]


def test_the_direct_rebuild_is_the_products_linear_map() -> None:
    """The search's own solve against ``GaussianModel.linear_map(...).apply``, a constant
    sensor included (the product gives it coefficient 0)."""
    from bench.honesty_oracle import rebuild
    from engine.model import GaussianModel

    rng = np.random.default_rng(11)
    x = rng.normal(size=(200, 5)) @ rng.normal(size=(5, 5))
    x[:, 3] = 2.0  # constant
    model = GaussianModel().fit(x[:150], tuple("abcde"))
    future = x[150:]
    for k in range(5):
        for sub in itertools.combinations(range(5), k):
            if not sub:
                continue
            expected = model.linear_map(list(sub)).apply(future[:, list(sub)])
            assert np.allclose(rebuild(model, sub, future), expected), sub


def test_an_unknown_case_is_refused_before_anything_runs_or_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in --cases ran nothing and wrote an empty result over the committed one."""
    import bench.honesty_oracle as oracle

    out = tmp_path / "result.json"
    first = B.CASES[0].name
    for main in (B.main, oracle.main):
        assert main(["--cases", f"{first},nope,beijing_nope", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == "error: unknown case(s): beijing_nope, nope\n"
        assert not out.exists()
    assert [c.name for c in B.chosen_cases(None)] == [c.name for c in B.CASES]
    assert [c.name for c in B.chosen_cases(first)] == [first]


def test_a_whole_network_is_left_out_of_the_exhaustive_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 ** n backup sets a fold: a case of more than 16 sensors is named and left out of
    a run of every case, and refused when asked for by name (nothing is written)."""
    import bench.honesty_oracle as oracle

    wide = tuple(f"S{i}_temp_degC" for i in range(17))
    monkeypatch.setattr(oracle, "_sensors_of", lambda dataset: wide)
    small = B.Case("small", "d", ("S[0-9]_*",), "avg", 4, 1.0, None, "choose")
    large = B.Case("large", "d", ("S*_temp_degC",), "avg", 4, 1.0, None, "choose")
    assert oracle.boundable([small, large]) == ([small], ["large"])
    monkeypatch.setattr(B, "CASES", [small, large])
    out = tmp_path / "result.json"
    assert oracle.main(["--cases", "large", "--out", str(out)]) == 2
    assert capsys.readouterr().err == "error: over 16 sensors, no exhaustive bound: large\n"
    assert not out.exists()
