"""Backup selection: feasibility, optimality against brute force, incremental maths."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from bench.common import random_covariance
from engine.errors import ParameterError
from engine.selection import Selection, brute_force_min_backup, select_backups

METHODS = ("paper", "greedy", "exact")


def random_instance(seed: int, n: int) -> tuple[np.ndarray, np.ndarray | float]:
    """A covariance with unequal scales and a target that needs a few sensors.

    The structure cycles through a factor model, AR(1) along a shuffled line and
    correlated clusters; odd seeds get per-sensor targets.
    """
    rng = np.random.default_rng(seed)
    if seed % 3 == 0:
        load = rng.normal(size=(n, int(rng.integers(1, 4))))
        corr = load @ load.T + np.diag(rng.uniform(0.05, 0.5, size=n))
    elif seed % 3 == 1:
        pos = rng.permutation(n)
        corr = rng.uniform(0.6, 0.95) ** np.abs(pos[:, None] - pos[None, :]).astype(float)
    else:
        labels = rng.integers(0, max(2, n // 3), size=n)
        load = rng.uniform(0.6, 0.95, size=labels.max() + 1)[labels]
        corr = np.where(labels[:, None] == labels[None, :], np.outer(load, load), 0.0)
        np.fill_diagonal(corr, 1.0)
    scale = np.exp(rng.uniform(-0.5, 0.5, size=n))
    cov = corr * np.outer(scale, scale)
    if seed % 2:
        return cov, rng.uniform(0.05, 0.5, size=n) * np.diag(cov)
    return cov, float(rng.uniform(0.05, 0.4) * np.mean(np.diag(cov)))


@functools.cache
def optimum(seed: int) -> Selection:
    """Brute-force optimum of instance ``seed`` (n = 5..12), computed once per run."""
    return brute_force_min_backup(*random_instance(seed, 5 + seed % 8))


def inverse_formula(cov: np.ndarray, backup: tuple[int, ...]) -> np.ndarray:
    """var_{i|O} with an explicit inverse (reference)."""
    var = np.diag(cov).copy()
    if backup:
        o = list(backup)
        var -= np.einsum("ij,ji->i", cov[:, o] @ np.linalg.inv(cov[np.ix_(o, o)]), cov[o, :])
        var[o] = 0.0
    return np.maximum(var, 0.0)


def is_feasible(cov, targets, backup) -> bool:
    t = np.broadcast_to(targets, (cov.shape[0],))
    return bool(np.all(inverse_formula(cov, backup) <= t * (1 + 1e-9) + 1e-10))


@pytest.mark.parametrize("seed", range(40))
def test_exact_matches_brute_force_and_heuristics_are_feasible(seed):
    cov, target = random_instance(seed, 5 + seed % 8)
    best = optimum(seed)
    assert best.feasible and is_feasible(cov, target, best.backup)
    for method in METHODS:
        sel = select_backups(cov, target, method)
        assert sel.method == method and sel.feasible, method
        assert is_feasible(cov, target, sel.backup), method
        assert sel.cost >= best.cost, method
        np.testing.assert_allclose(
            sel.conditional_variance, inverse_formula(cov, sel.backup), rtol=1e-8, atol=1e-12
        )
    assert select_backups(cov, target, "exact").cost == best.cost


def test_instances_are_hard_enough_to_separate_the_methods():
    """The exact-vs-brute-force check above is only meaningful if heuristics can miss."""
    gaps = {"paper": 0, "greedy": 0}
    for seed in range(40):
        cov, target = random_instance(seed, 5 + seed % 8)
        best = optimum(seed).cost
        for method in gaps:
            gaps[method] += select_backups(cov, target, method).cost > best
    assert gaps["paper"] >= 5  # the seed's greedy is often suboptimal
    assert gaps["greedy"] <= gaps["paper"]


def test_brute_force_is_minimal_and_lexicographically_first():
    cov, target = random_instance(3, 9)
    best = brute_force_min_backup(cov, target)
    from itertools import combinations

    feasible_sets = [
        s
        for k in range(best.cost + 1)
        for s in combinations(range(9), k)
        if is_feasible(cov, target, s)
    ]
    assert min(len(s) for s in feasible_sets) == best.cost
    assert best.backup == min(s for s in feasible_sets if len(s) == best.cost)


def test_greedy_downdates_match_direct_formula_on_larger_instance():
    rng = np.random.default_rng(11)
    n = 300
    load = rng.normal(size=(n, 40))
    cov = load @ load.T + np.diag(rng.uniform(0.1, 1.0, size=n))
    sel = select_backups(cov, 0.05 * np.mean(np.diag(cov)), "greedy")
    assert sel.feasible and 10 < sel.cost < n
    np.testing.assert_allclose(
        sel.conditional_variance, inverse_formula(cov, sel.backup), rtol=1e-7, atol=1e-9
    )


def test_greedy_never_worse_than_paper_on_this_instance_and_both_feasible():
    cov, target = random_instance(17, 40)
    paper = select_backups(cov, target, "paper")
    greedy = select_backups(cov, target, "greedy")
    assert paper.feasible and greedy.feasible
    assert len(set(greedy.backup)) == greedy.cost and len(set(paper.backup)) == paper.cost


def test_paper_greedy_adds_the_sensor_minimising_the_max_variance():
    cov, target = random_instance(5, 10)
    sel = select_backups(cov, target, "paper")
    chosen: list[int] = []
    for j in sel.backup:  # replay: every step must be the argmin of max_i var_{i|O+j}
        scores = [
            inverse_formula(cov, (*chosen, k)).max() if k not in chosen else np.inf
            for k in range(10)
        ]
        assert j == int(np.argmin(scores))
        chosen.append(j)


def test_per_sensor_targets_are_respected():
    cov, target = random_instance(8, 12)
    targets = np.full(12, target)
    targets[[2, 7]] = 0.0  # these two must be backed up (nothing predicts them exactly)
    targets[5] = 10.0 * cov[5, 5]  # already satisfied without any backup
    for method in METHODS:
        sel = select_backups(cov, targets, method)
        assert sel.feasible and {2, 7} <= set(sel.backup)
        assert np.all(sel.conditional_variance <= targets * (1 + 1e-9) + 1e-12)
        np.testing.assert_array_equal(sel.targets, targets)
    assert select_backups(cov, targets, "exact").cost == brute_force_min_backup(cov, targets).cost


def test_scalar_target_broadcasts_and_loose_target_backs_up_nothing():
    cov, _ = random_instance(9, 8)
    for method in METHODS:
        sel = select_backups(cov, 2.0 * np.max(np.diag(cov)), method)
        assert sel.backup == () and sel.cost == 0 and sel.feasible
        np.testing.assert_allclose(sel.conditional_variance, np.diag(cov))
        assert sel.targets.shape == (8,)


@pytest.mark.parametrize("method", METHODS)
def test_zero_target_backs_up_every_sensor(method):
    cov, _ = random_instance(10, 9)
    sel = select_backups(cov, 0.0, method)
    assert sorted(sel.backup) == list(range(9)) and sel.feasible
    np.testing.assert_array_equal(sel.conditional_variance, 0.0)


def test_constant_and_duplicate_sensors_need_no_backup():
    cov, target = random_instance(12, 8)
    big = np.zeros((10, 10))
    big[:8, :8] = cov
    big[8, :8] = big[:8, 8] = cov[3]  # sensor 8 duplicates sensor 3
    big[8, 8] = cov[3, 3]
    # sensor 9 is constant: zero row and column
    for method in METHODS:
        sel = select_backups(big, target, method)
        assert sel.feasible and 9 not in sel.backup
        assert not {3, 8} <= set(sel.backup)  # one of the twins is enough
        assert sel.conditional_variance[9] == 0.0


def test_exact_is_limited_to_small_n():
    cov, target = random_instance(13, 26)
    with pytest.raises(ParameterError, match="greedy"):
        select_backups(cov, target, "exact")
    assert select_backups(cov, target, "exact", exact_max_n=26).feasible
    with pytest.raises(ParameterError, match="16"):
        brute_force_min_backup(*random_instance(14, 17))


def test_exact_on_twenty_sensors_beats_or_ties_greedy():
    cov, target = random_instance(15, 20)
    exact = select_backups(cov, target, "exact")
    greedy = select_backups(cov, target, "greedy")
    assert exact.feasible and exact.cost <= greedy.cost


def test_selection_result_type():
    cov, target = random_instance(16, 6)
    sel = select_backups(cov, target)
    assert isinstance(sel, Selection) and sel.method == "greedy"
    assert sel.cost == len(sel.backup) and all(isinstance(j, int) for j in sel.backup)


@pytest.mark.parametrize(
    ("cov", "targets", "fragment"),
    [
        (np.ones((2, 3)), 1.0, "square"),
        (np.ones(3), 1.0, "square"),
        (np.zeros((0, 0)), 1.0, "square"),
        (np.array([[1.0, 0.5], [0.2, 1.0]]), 1.0, "symmetric"),
        (np.array([[1.0, np.nan], [np.nan, 1.0]]), 1.0, "finite"),
        (np.array([[-1.0, 0.0], [0.0, 1.0]]), 1.0, "diagonal"),
        (np.eye(2), -0.1, "targets"),
        (np.eye(2), np.array([0.1, np.nan]), "targets"),
        (np.eye(2), np.ones(3), r"\(3,\)"),
    ],
)
def test_bad_inputs_are_rejected(cov, targets, fragment):
    with pytest.raises(ParameterError, match=fragment):
        select_backups(cov, targets)


def test_unknown_method_is_rejected():
    with pytest.raises(ParameterError, match="magic"):
        select_backups(np.eye(3), 0.5, "magic")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_sensors_only_coverable_by_themselves_are_detected_exactly(seed):
    """The greedy's first block is {i : var_{i | all others} > t_i}, nothing more."""
    from engine.selection.greedy import _Greedy

    cov, target = random_instance(seed, 12)
    t = np.array(np.broadcast_to(target, (12,)))
    t[[0, 6]] = 2.0 * np.diag(cov)[[0, 6]]  # within target already, yet still informative
    alone = 1.0 / np.diag(np.linalg.inv(cov))
    state = _Greedy(cov, t, pool=None)
    assert state.chosen == [i for i in range(12) if alone[i] > t[i]]
    for method in METHODS:
        assert set(state.chosen) <= set(select_backups(cov, t, method).backup)


def test_exchange_pass_fixes_the_greedy_trap_on_a_chain(monkeypatch):
    """On an AR(1) chain the greedy starts in the middle (3 sensors); the optimum is 2."""
    import engine.selection.greedy as selection

    pos = np.arange(5)
    cov = 0.9 ** np.abs(pos[:, None] - pos[None, :]).astype(float)
    assert brute_force_min_backup(cov, 0.2).cost == 2
    assert select_backups(cov, 0.2, "greedy").cost == 2
    monkeypatch.setattr(selection, "_EXCHANGE_ROUNDS", 0)
    assert select_backups(cov, 0.2, "greedy").cost == 3


@pytest.mark.parametrize("structure", ["factor", "cluster", "toeplitz"])
def test_zero_targets_back_up_every_informative_sensor(structure):
    """Every target 0 (a plan that cannot measure a miss rate): every sensor with
    variance is indispensable, so the answer is all of them, and a constant sensor
    (zero variance, known exactly) is left out; the same set the brute force finds."""
    rng = np.random.default_rng(4)
    cov = random_covariance(12, rng, structure)
    cov[3, :] = cov[:, 3] = 0.0  # a constant sensor
    sel = select_backups(cov, 0.0)
    assert sorted(sel.backup) == [i for i in range(12) if i != 3]
    assert sel.feasible and np.all(sel.conditional_variance == 0.0)
    assert sorted(sel.backup) == sorted(brute_force_min_backup(cov, 0.0).backup)


def test_zero_targets_with_duplicate_sensors_still_choose_a_feasible_set():
    """Exact duplicates: no sensor is indispensable (its twin covers it), so the greedy
    runs as usual and keeps one of each pair."""
    base = random_covariance(4, np.random.default_rng(8), "factor")
    twin = np.kron(np.ones((2, 2)), base)  # sensors i and i + 4 are the same
    sel = select_backups(twin, 0.0)
    assert sel.feasible and sel.cost == 4


@pytest.mark.parametrize(
    ("at", "value", "fragment"), [((1300, 40), 7.0, "symmetric"), ((1100, 1500), np.inf, "finite")]
)
def test_bad_entries_are_found_in_any_block(at, value, fragment):
    """The checks run block by block (1,024 wide): an entry far from the first block
    is still seen."""
    cov = np.eye(1600)
    cov[at] = value
    with pytest.raises(ParameterError, match=fragment):
        select_backups(cov, 0.5)


def test_a_nearly_symmetric_covariance_is_symmetrised_and_left_as_given():
    cov, target = random_instance(6, 9)
    skewed = cov.copy()
    skewed[0, 3] += 1e-12 * np.abs(cov).max()
    before = skewed.copy()
    assert select_backups(skewed, target).backup == select_backups(cov, target).backup
    assert np.array_equal(skewed, before)


def test_the_float32_block_is_rebuilt_from_the_factor_on_two_threads():
    """The ranking block after a few additions equals ``(C[rows, cols] - L^T L) / s``
    computed directly, at a size where it is rebuilt on two threads."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.selection.greedy import _Greedy

    rng = np.random.default_rng(0)
    load = 3.0 * rng.normal(size=(700, 5))
    cov = load @ load.T + np.diag(rng.uniform(0.2, 1.0, size=700))
    with ThreadPoolExecutor(max_workers=2) as pool:
        state = _Greedy(cov, 0.1 * np.diag(cov), pool)
        for j in (5, 300, 650):
            state.add(j)
        state.rows = np.sort(rng.choice(700, size=500, replace=False))
        state.cols = np.setdiff1d(np.arange(700), state.chosen)
        state._rebuild()
    lines = state.lines[: len(state.chosen)]
    exact = cov[np.ix_(state.rows, state.cols)] - lines[:, state.rows].T @ lines[:, state.cols]
    assert state.block.dtype == np.float32 and state.block.flags.f_contiguous
    np.testing.assert_allclose(state.block, exact / state.scale, rtol=1e-6, atol=1e-6)
