"""`python -m bench goals` gathers each part's goal lines (bench/report.py goal_line): each line
carries its verdict, worked out from the figure and the goal, never printed by hand."""

from __future__ import annotations

from bench import footprint, goals, report, tasks

MB = 1024 * 1024


def test_a_goal_line_says_met_not_met_or_reported_and_is_found_by_its_prefix() -> None:
    met = report.goal_line("idle CPU", "0.45 % of a core", "< 1 %", True)
    missed = report.goal_line("idle CPU", "1.20 % of a core", "< 1 %", False)
    reported = report.goal_line("footprint at rest, the Procfile way", "194 MB PSS in 5 processes", "", None)
    assert [line.rsplit(maxsplit=1)[-1] for line in (met, reported)] == ["met", "reported"]
    assert missed.endswith("NOT MET")
    assert all(line.startswith(goals.GOAL_PREFIX) for line in (met, missed, reported))


def test_a_p99_goal_is_met_at_the_limit_and_missed_above_it() -> None:
    under = [1.0] * 99 + [5.0]
    over = [1.0] * 98 + [5.5, 5.5]
    assert report.p99_goal_line("wake latency", under, 5.0).endswith(" met")
    assert "p99 5.50 ms" in report.p99_goal_line("wake latency", over, 5.0)
    assert report.p99_goal_line("wake latency", over, 5.0).endswith("NOT MET")


def test_task_output_is_flat_while_the_large_tail_stays_within_half_again_of_the_small() -> None:
    assert tasks.flatness_line(MB, 0.010, 1024 * MB, 0.0149).endswith(" met")
    assert tasks.flatness_line(MB, 0.010, 1024 * MB, 0.016).endswith("NOT MET")
    assert "1 MB → 1,024 MB" in tasks.flatness_line(MB, 0.010, 1024 * MB, 0.011)


def test_the_embedded_footprint_goal_counts_memory_and_processes_and_the_procfile_way_is_reported() -> None:
    small = {"web": (100 * MB, 60 * MB, 3), "worker": (100 * MB, 80 * MB, 1), "redis": (10 * MB, 5 * MB, 1)}
    too_many = {**small, "clock": (10 * MB, 1 * MB, 2)}
    too_big = {**small, "worker": (200 * MB, 90 * MB, 1)}
    assert footprint.at_rest_goal_line(small, procfile=False).endswith(" met")
    assert "145 MB PSS in 5 processes" in footprint.at_rest_goal_line(small, procfile=False)
    assert footprint.at_rest_goal_line(too_many, procfile=False).endswith("NOT MET")
    assert footprint.at_rest_goal_line(too_big, procfile=False).endswith("NOT MET")
    assert footprint.at_rest_goal_line(too_big, procfile=True).endswith("reported")


def test_the_goals_run_names_its_parts_as_skip_expects() -> None:
    names = [goals.part_name(part) for part in goals.PARTS]
    assert names == ["calls", "startup", "footprint", "footprint", "idle", "main", "delivery", "providers", "tasks"]
