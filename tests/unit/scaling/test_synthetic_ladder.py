"""The laws ladders are drawn from, the bending ones included: their optima and their bends."""

import math

import pytest

from marin_pipelines.scaling.synthetic_ladder import (
    HOFFMANN,
    BrokenLaw,
    LateFloorLaw,
    numeric_optimum,
    optimum,
)


def test_the_numeric_optimum_finds_hoffmanns_closed_form():
    for flops in (1e18, 8e19, 1e22):
        exact = HOFFMANN.compute_optimal(flops)
        found = numeric_optimum(HOFFMANN, flops, guess=exact[0] * 20)
        assert found == pytest.approx(exact, rel=1e-4)


def test_a_broken_law_is_its_base_above_the_break_and_falls_at_the_slowed_rate_below_it():
    law = BrokenLaw(HOFFMANN, reducible_break=1.2, slowdown=0.5)
    for n, d in ((1e6, 1e7), (1e5, 1e9)):  # reducible loss far above 1.2
        assert law.predict(n, d) == pytest.approx(HOFFMANN.predict(n, d), rel=1e-6)
    # far below the break, a tenfold fall of the base's reducible loss is a threefold fall (10^0.5)
    reducible = [HOFFMANN.predict(n, n * 20) - HOFFMANN.E for n in (1e11, 1e14)]
    bent = [law.predict(n, n * 20) - HOFFMANN.E for n in (1e11, 1e14)]
    assert math.log(bent[0] / bent[1]) == pytest.approx(0.5 * math.log(reducible[0] / reducible[1]), rel=1e-3)
    assert optimum(law, 8e19)[1] > optimum(HOFFMANN, 8e19)[1]  # past the break it lands higher


def test_a_late_floor_is_invisible_on_the_ladder_and_holds_the_loss_above_it_past_it():
    law = LateFloorLaw(HOFFMANN, floor=2.75, sharpness=16)
    # 0.1% above the base at the ladder's lowest budget: a sixth of one run's noise (0.6%)
    assert optimum(law, 1e18)[1] == pytest.approx(optimum(HOFFMANN, 1e18)[1], rel=2e-3)
    assert optimum(law, 8e19)[1] > 2.75 > optimum(HOFFMANN, 8e19)[1]
    assert optimum(law, 1e24)[1] == pytest.approx(2.75, rel=1e-3)
