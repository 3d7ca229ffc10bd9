"""`make bench` says which rounds miss a target; two decimal places would show 0.598 as 0.60."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.http import against


def test_a_round_just_under_its_target_is_reported_missed() -> None:
    assert against([0.66, 0.5985], 0.6) == "0.660x, 0.599x (target >= 0.6x: MISSED in round 2)"
    assert against([0.6, 0.61], 0.6).endswith("met in every round)")


def test_an_upper_bound_is_missed_when_exceeded() -> None:
    assert against([1.36, 1.61], 1.6, at_most=True).endswith("MISSED in round 2)")
    assert against([1.5], 1.5, at_most=True) == "1.500x (target <= 1.5x: met in every round)"


def test_the_busier_worker_share_is_of_the_two_busiest_processes() -> None:
    from bench.http import busier_share

    assert busier_share({1: 3.0, 2: 1.0, 3: 0.1}) == 0.75  # the small third: the scheduler
    assert busier_share({1: 2.0, 2: 2.0}) == 0.5
    assert busier_share({1: 2.0}) == 1.0


def test_each_window_is_compared_with_the_hello_worlds_window_of_its_turn() -> None:
    from bench.http import Figures, window_ratios

    def figures(*rates: float) -> Figures:
        return Figures(rate=sum(rates) / len(rates), p50=1.0, p99=2.0, windows=rates)

    service = [figures(600, 700), figures(650, 640)]
    hello = [figures(1000, 1400), figures(1300, 800)]
    assert window_ratios(service, hello) == [0.6, 0.5, 0.5, 0.8]


def test_a_servers_figures_count_its_database_and_the_whole_machine_per_action() -> None:
    """The windows' database and machine CPU become ms per action over all their actions; the
    idle share is of the machine's time, busy and idle together; its context switches are
    per action too."""
    from bench.http import Figures, Window

    windows = [
        Window([0.001] * 300, 1.0, 0.3, 0.5, database=0.09, busy=0.6, idle=0.2, switches=9000),
        Window([0.002] * 100, 0.5, 0.1, 0.5, database=0.03, busy=0.2, idle=0.0, switches=1000),
    ]
    figures = Figures.of(windows)
    assert figures.server_cpu == pytest.approx(1.0)  # 0.4 s over 400 actions
    assert figures.database_cpu == pytest.approx(0.3)
    assert figures.machine_cpu == pytest.approx(2.0)
    assert figures.idle == pytest.approx(0.2)
    assert figures.switches == pytest.approx(25.0)
    assert "database CPU  0.30 ms" in str(figures) and "20% idle" in str(figures)
    assert "25.0 switches/action" in str(figures)
    assert "database" not in str(Figures.of([Window([0.001], 1.0, 0.1)]))  # SQLite's


@pytest.mark.postgres
def test_the_database_server_measured_is_the_postmaster_of_the_services_connections(
    postgres_url: str,
) -> None:
    """``database_pid`` finds the PostgreSQL server the URL names, when it runs on this machine:
    a new connection's backend is one of its processes, whose CPU the bench sums."""
    import psycopg

    from bench.http import database_pid, processes, tree

    postmaster = database_pid(postgres_url)
    assert postmaster is not None
    with psycopg.connect(postgres_url) as conn:
        parents, _ = processes()
        assert conn.info.backend_pid in tree(postmaster, parents)


def test_the_machine_times_grow_with_the_cpu_used() -> None:
    import time

    from bench.http import machine_times

    busy, idle, switches = machine_times()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    later_busy, later_idle, later_switches = machine_times()
    assert later_busy - busy >= 0.15 and later_idle >= idle
    assert later_switches >= switches > 0


def test_past_positions_alternate_and_read_each_version_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each version is read once (so each is rebuilt from the store, cold), the batches near 10
    and near 5,000 taking turns."""
    import bench.http

    read: list[range] = []

    def past_reads(port: int, game_id: str, versions: range) -> float:
        read.append(versions)
        return float(len(read))

    monkeypatch.setattr(bench.http, "past_reads", past_reads)
    pairs = bench.http.past_pairs(8000, "g", batches=5)
    assert pairs == [(1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (7.0, 8.0), (9.0, 10.0)]
    versions = [v for r in read for v in r]
    assert len(versions) == len(set(versions)) == 110
    assert all(len(r) == 11 for r in read)
    assert all(max(r) < 60 for r in read[0::2]) and all(min(r) > 4950 for r in read[1::2])


@pytest.mark.slow
def test_the_benchs_long_game_stays_in_progress(tmp_path: Path) -> None:
    """The past-positions bench needs a game thousands of events long: its script must keep the
    game going under the rules, not end it (a script that does fails `make bench` at its last
    step)."""
    from bench.http import long_game
    from tests.support.http import HOST, send
    from tests.support.servers import free_port, serving

    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env={"CANTSTOP_THREADS": "4"}, ready_port=port):
        game_id, version = long_game(port, 300)
        assert version >= 300
        state = send(port, "GET", f"/v1/games/{game_id}").json()
        assert state["status"] == "in_progress" and state["version"] == version


@pytest.mark.postgres
def test_inproc_compares_a_tree_on_sqlite_with_one_on_postgresql_and_drops_its_databases(
    postgres_server_url: str,
) -> None:
    """`bench.inproc --stores sqlite,postgres`: A plays on a SQLite file, B on a fresh
    PostgreSQL database (sleeping after each action, ``--sleep``); both answer each batch, and
    the databases made for the run are gone after it."""
    import re
    import subprocess
    import sys

    import psycopg

    repo = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "bench.inproc", str(repo), str(repo), "--pairs", "2"]
    command += ["--actions", "20", "--sleep", "0.0001", "--stores", "sqlite,postgres"]
    done = subprocess.run(
        [*command, "--postgres", postgres_server_url],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("per action | B/A") == 2
    assert "B/A, median of 2 pairs: CPU per action" in done.stdout
    assert "A played on PostgreSQL" not in done.stdout
    played = re.search(r"B played on PostgreSQL: ([\d,]+) events stored", done.stdout)
    assert played is not None and int(played.group(1).replace(",", "")) >= 60  # 3 x 20 actions
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'cantstop_instructions_%'"
        ).fetchall()
    assert left == []
