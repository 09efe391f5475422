"""Percentiles and the printed table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: a value that was actually observed, never an interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class ThroughputRow:
    name: str
    per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    ratio: float
    cpu_ms: float  # the server processes' CPU per answered request
    cpu_ratio: float  # the baseline's CPU per request ÷ this one's


def throughput_table(rows: Sequence[ThroughputRow]) -> str:
    header = (
        f"{'endpoint':<34}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}{'× bare':>9}"
        f"{'CPU ms/req':>12}{'CPU × bare':>12}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.name:<34}{row.per_second:>9,.0f}{row.p50_ms:>9.1f}{row.p99_ms:>9.1f}{row.errors:>8}{row.ratio:>9.2f}"
            f"{row.cpu_ms:>12.3f}{row.cpu_ratio:>12.2f}"
        )
    return "\n".join(lines)


def latency_line(label: str, values_ms: Sequence[float]) -> str:
    return (
        f"{label:<44}p50 {percentile(values_ms, 0.50):7.2f} ms   p99 {percentile(values_ms, 0.99):7.2f} ms"
        f"   max {max(values_ms):7.2f} ms"
    )


def goal_line(figure: str, measured: str, goal: str, met: bool | None) -> str:
    """A figure with its goal beside it (issue #37); `python -m bench goals` gathers these lines
    from every part it runs. `met` None: a figure reported without a goal."""
    verdict = "reported" if met is None else ("met" if met else "NOT MET")
    return f"goal  {figure:<44}{measured:<34}{goal:<14}{verdict}"


def p99_goal_line(figure: str, values_ms: Sequence[float], limit_ms: float) -> str:
    p99 = percentile(values_ms, 0.99)
    return goal_line(figure, f"p99 {p99:,.2f} ms", f"≤ {limit_ms:g} ms", p99 <= limit_ms)
