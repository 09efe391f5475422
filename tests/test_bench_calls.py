"""`python -m bench calls` divides each call's figures by the bare endpoint's measured just around it."""

from __future__ import annotations

import pytest

from bench.calls import Measured, between_bare, ratio_of


def test_a_call_is_divided_by_the_mean_of_the_bare_measurements_around_it() -> None:
    before = Measured(requests=4000, seconds=1.0, cpu_seconds=1.0)  # 0.25 ms a request
    after = Measured(requests=6000, seconds=1.0, cpu_seconds=1.2)  # 0.2 ms a request
    totals = Measured()
    between_bare(Measured(requests=2000, seconds=1.0, cpu_seconds=1.0, p99_ms=[9.0]), before, after, totals)
    assert totals.ratios == [pytest.approx(0.4)]
    assert totals.cpu_ratios == [pytest.approx(0.5 / 0.225)]
    assert (totals.requests, totals.seconds, totals.p99_ms) == (2000, 1.0, [9.0])


def test_the_ratio_is_the_median_of_the_rounds_so_one_disturbed_round_does_not_decide_it() -> None:
    totals = Measured()
    bare = Measured(requests=1000, seconds=1.0, cpu_seconds=0.3)
    for requests in (550, 20, 600):
        between_bare(Measured(requests=requests, seconds=1.0, cpu_seconds=0.5), bare, bare, totals)
    assert ratio_of(totals) == pytest.approx(0.55)
    assert totals.per_second == pytest.approx(390)  # the table's req/s: every request of every round
