import numpy as np
import pytest

from marin_pipelines.scaling.chinchilla import ChinchillaLaw, fit_chinchilla
from marin_pipelines.scaling.fit import fit
from marin_pipelines.scaling.isoflop import fit_isoflops

TRUE = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al.'s fit


def grid_runs(n_sizes: int, n_tokens: int, noise: float, seed: int = 0) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    sizes, tokens = np.geomspace(1e7, 1e10, n_sizes), np.geomspace(1e8, 1e12, n_tokens)
    return [
        {"params": n, "tokens": d, "loss": TRUE.predict(n, d) * float(np.exp(noise * rng.normal()))}
        for n in sizes
        for d in tokens
    ]


def test_parameters_are_recovered_within_two_percent_from_noisy_runs():
    runs = grid_runs(8, 8, noise=0.001)
    law = fit_chinchilla(*(np.array([r[k] for r in runs]) for k in ("params", "tokens", "loss")))
    for name in ChinchillaLaw.PARAMETERS:
        assert getattr(law, name) == pytest.approx(getattr(TRUE, name), rel=0.02), name


def test_noiseless_runs_are_recovered_exactly():
    runs = grid_runs(4, 4, noise=0.0)
    law = fit_chinchilla(*(np.array([r[k] for r in runs]) for k in ("params", "tokens", "loss")))
    for name in ChinchillaLaw.PARAMETERS:
        assert getattr(law, name) == pytest.approx(getattr(TRUE, name), rel=1e-4), name


def test_fit_intervals_are_seeded_and_cover_the_truth():
    runs = grid_runs(4, 4, noise=0.003, seed=2)
    first, again = fit(runs, bootstrap=20, seed=7), fit(runs, bootstrap=20, seed=7)
    assert first.method == "chinchilla" and len(first.resamples) == 20
    assert first.intervals() == again.intervals()
    for name, (low, high) in first.intervals().items():
        assert low <= getattr(first.law, name) <= high, name
    prediction = first.predict(1e11, 2e12)
    low, high = prediction["loss_interval"]
    assert low <= prediction["loss"] <= high
    assert prediction["loss"] == pytest.approx(TRUE.predict(1e11, 2e12), rel=0.03)


def test_a_two_by_two_ladder_falls_back_to_log_linear_and_says_so():
    runs = grid_runs(2, 2, noise=0.0)
    result = fit(runs, bootstrap=10)
    assert result.method == "log_linear" and "4 runs for 5 parameters" in result.reason
    assert set(result.intervals()) == {"A", "alpha", "beta"}
    assert result.compute_optimal(1e20) is None  # a log-linear law has no optimum
    assert result.as_dict()["method"] == "log_linear"


def test_isoflop_parabolas_find_the_compute_optimum():
    budgets = [1e18, 1e19, 1e20]
    runs = []
    for c in budgets:
        n_opt, _ = TRUE.compute_optimal(c)
        for n in n_opt * np.geomspace(0.25, 4, 7):
            runs.append(
                {"budget": c, "params": n, "tokens": c / (6 * n), "loss": TRUE.predict(n, c / (6 * n))}
            )
    iso = fit_isoflops(runs)
    assert len(iso.profiles) == 3 and all(p.inside for p in iso.profiles)
    for profile in iso.profiles:
        n_opt, d_opt = TRUE.compute_optimal(profile.budget)
        assert profile.params == pytest.approx(n_opt, rel=0.1)
        assert profile.tokens == pytest.approx(d_opt, rel=0.1)
    exponent = TRUE.beta / (TRUE.alpha + TRUE.beta)  # N* grows as C^(beta / (alpha + beta))
    assert iso.params.exponent == pytest.approx(exponent, abs=0.02)
    assert iso.tokens.exponent == pytest.approx(1 - exponent, abs=0.02)
    result = fit(runs, bootstrap=0)
    assert result.compute_optimal(1e21)["source"] == "isoflop"


def test_a_budget_with_two_sizes_has_no_profile():
    runs = [{"budget": 1e18, "params": n, "tokens": 1e18 / (6 * n), "loss": 3.0} for n in (1e7, 1e8)]
    assert fit_isoflops(runs).profiles == () and fit_isoflops(runs).compute_optimal(1e19) is None


def test_vertices_outside_the_ladder_stay_out_of_the_power_laws():
    # loss rising with N at every budget: each parabola's vertex lies below the smallest size
    runs = [
        {"budget": c, "params": n, "tokens": c / (6 * n), "loss": 5 + np.log(n) ** 2 / 100 - np.log(c) / 100}
        for c in (1e15, 1e16)
        for n in (1e6, 2e6, 4e6)
    ]
    iso = fit_isoflops(runs)
    assert len(iso.profiles) == 2 and not any(p.inside for p in iso.profiles)
    assert iso.params is None and iso.compute_optimal(1e17) is None
