"""The ``cantstop`` command: serve the API, verify transcripts offline."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from eventsourcing.persistence import PersistenceError
from gunicorn.app.base import BaseApplication
from tqdm import tqdm  # type: ignore[import-untyped]

from domain import jsondoc
from domain.analysis import AnalysisRefused, analyse
from domain.audit import MalformedExport, audit_records, parse_export, replayed, split_exports
from domain.errors import DomainError, InvalidRequest
from domain.game import format_at
from domain.receipts import held_by, receipt_problem
from domain.record_sheet import record_sheet
from domain.tournament import audit_tournament, is_tournament_export, parse_tournament_export
from domain.transcript import MalformedTranscript, verify
from service import arena_cli, collector, logformat, metrics
from service.application.analysis.jobs import JobConfig, Supervisor, arm_cpu_limit
from service.application.errors import ApplicationError
from service.application.games.receipts import verify as verify_receipt
from service.application.players.ratings import LedgerFold, Ratings
from service.application.players.standings import rated_game
from service.config import ConfigError, ServerSettings, Settings
from service.live.hub import LiveConfig
from service.persistence.backup import BackupError, backup_sqlite, sqlite_path
from service.persistence.errors import StoreUnavailable
from service.persistence.settings import postgres_connect_error
from service.render.sheet import render_csv, render_pdf, render_text
from service.runtime import Runtime


class Unreadable(Exception):
    """Input that cannot be judged at all: exit status 2 with a one-line reason."""


def read_json(name: str) -> Any:
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return jsondoc.loads(data)
    except jsondoc.MalformedJson as exc:
        raise Unreadable(f"{name}: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    """One verdict; or, for several files, one JSON line each, in order, a file that cannot be
    judged included (``{"file": …, "valid": false, "malformed": reason}``, its reason on
    standard error too), so that the lines match the files one to one."""
    worst = 0
    several = len(args.files) > 1
    for name in args.files:
        try:
            verdict = verify(read_json(name), trace=args.trace)
        except (Unreadable, MalformedTranscript) as exc:
            reason = str(exc).splitlines()[0]
            if isinstance(exc, MalformedTranscript):
                reason = f"{name}: malformed transcript: {reason}"
            print(reason, file=sys.stderr)
            if several:
                line = {"file": name, "valid": False, "malformed": reason}
                print(json.dumps(line, ensure_ascii=False))
            worst = 2
            continue
        if several:
            print(json.dumps({"file": name, **verdict}, ensure_ascii=False))
        else:
            print(json.dumps(verdict, indent=2, ensure_ascii=False))
        if not verdict["valid"]:
            worst = max(worst, 1)
    return worst


def read_export(name: str) -> tuple[dict[str, Any], list[Any]]:
    """An export file (``-``: standard input) as its header and records, or Unreadable."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return parse_export(data)
    except MalformedExport as exc:
        raise Unreadable(f"{name}: not a game export: {exc}") from None


def read_exports(name: str, data: bytes | None = None) -> list[tuple[dict[str, Any], list[Any]]]:
    """A file of one export or several one after another (an account's bulk export); ``data``:
    its bytes, already read."""
    try:
        if data is None:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return [parse_export(part) for part in split_exports(data)] or [parse_export(data)]
    except MalformedExport as exc:
        raise Unreadable(f"{name}: not a game export: {exc}") from None


def cmd_audit(args: argparse.Namespace) -> int:
    """Audit a game export offline (no server, no database): the same JSON as ``/audit``. A
    file of several exports (an account's bulk export) gets one verdict per game, as JSON
    Lines with each game's id; exit 0 when every game is valid. A tournament's export (told by
    its header) goes to ``cmd_audit_tournament``."""
    try:
        data = read_input(args.file)
        if is_tournament_export(data):
            return cmd_audit_tournament(args, data)
        if args.games is not None:
            raise Unreadable(f"{args.file}: --games goes with a tournament's export")
        exports = read_exports(args.file, data)
    except Unreadable as exc:
        print(exc, file=sys.stderr)
        return 2
    if len(exports) == 1:
        header, records = exports[0]
        verdict = audit_records(records)
        if args.receipt is not None or args.keys is not None:
            try:
                check = receipt_check(args.receipt, args.keys, header, records)
            except Unreadable as exc:
                print(exc, file=sys.stderr)
                return 2
            verdict["checks"].append(check)
            verdict["valid"] = verdict["valid"] and check["ok"]
            if not check["ok"] and check["version"] is not None:
                blamed = [v for v in (verdict["first_bad_version"], check["version"]) if v]
                verdict["first_bad_version"] = min(blamed)
        print(json.dumps(verdict, indent=2, ensure_ascii=False))
        return 0 if verdict["valid"] else 1
    if args.receipt is not None or args.keys is not None:
        print(f"{args.file}: --receipt checks one game's export, not several", file=sys.stderr)
        return 2
    valid = True
    for header, records in exports:
        verdict = {"game_id": header.get("game_id"), **audit_records(records)}
        valid = valid and verdict["valid"]
        print(json.dumps(verdict, ensure_ascii=False))
    return 0 if valid else 1


def read_input(name: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None


def cmd_audit_tournament(args: argparse.Namespace, data: bytes) -> int:
    """Audit a tournament's export offline (docs/tournaments.md): its pairings recomputed by the
    rule, its results and standings, and with ``--games`` (its tables' game exports, one after
    another) each result against its game. Prints the verdict; exit 0 when valid."""
    if args.receipt is not None or args.keys is not None:
        raise Unreadable(f"{args.file}: --receipt checks a game's export, not a tournament's")
    try:
        header, records = parse_tournament_export(data)
    except MalformedExport as exc:
        raise Unreadable(f"{args.file}: not a tournament export: {exc}") from None
    games = None
    if args.games is not None:
        games = {str(h.get("game_id")): (h, r) for h, r in read_exports(args.games)}
    verdict = audit_tournament(header, records, games)
    print(json.dumps(verdict, indent=2, ensure_ascii=False))
    return 0 if verdict["valid"] else 1


def receipt_check(
    receipt_file: str | None, keys_file: str | None, header: dict[str, Any], records: list[Any]
) -> dict[str, Any]:
    """The check ``receipt`` (contract 1.2): the saved receipt's signature verifies with one of
    the saved keys, and the export holds the receipt's version with its hash."""
    if receipt_file is None or keys_file is None:
        raise Unreadable("--receipt and --keys go together: a receipt is checked with the keys")
    receipt, keys = read_json(receipt_file), read_json(keys_file)
    if isinstance(receipt, dict) and "receipt" in receipt:  # a saved action answer, whole
        receipt = receipt["receipt"]
    problem = receipt_problem(receipt)
    if problem is None and not (isinstance(keys, dict) and isinstance(keys.get("keys"), list)):
        problem = 'the keys are not an answer of GET /v1/keys ({"keys": [...]})'
    if problem is None:
        game_id = header.get("game_id")
        problem = verify_receipt(receipt, keys) or held_by(
            receipt, game_id if isinstance(game_id, str) else None, records
        )
    version = receipt.get("version") if isinstance(receipt, dict) else None
    good = isinstance(version, int) and not isinstance(version, bool) and version > 0
    blamed = version if problem is not None and good else None
    detail = problem or (
        f"signed by {receipt['key_id']}; the export holds version {receipt['version']} "
        "with the receipt's hash"
    )
    return {"name": "receipt", "ok": problem is None, "detail": detail, "version": blamed}


def cmd_ratings(args: argparse.Namespace) -> int:
    """Recompute, offline, every account's ratings from a saved ratings ledger (contract 1.3:
    equal to the server's), or those of the rated games in exports (contract 1.2: equal only
    when the file holds every rated game those games' accounts and their opponents played)."""
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        print(f"{args.file}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if _is_ledger(data):
        return _ratings_of_ledger(args.file, data)
    try:
        exports = read_exports(args.file, data)
    except Unreadable as exc:
        print(exc, file=sys.stderr)
        return 2
    finished = []
    rules: dict[str, tuple[dict[str, Any], int]] = {}
    seen: set[str] = set()
    for header, records in exports:
        game_id = str(header.get("game_id"))
        if game_id in seen:  # the same game in two accounts' exports: counted once
            continue
        seen.add(game_id)
        if not audit_records(records)["valid"]:
            print(f"{args.file}: game {game_id} does not verify: left out", file=sys.stderr)
            continue
        game = replayed(records)
        found = rated_game(game, records, game_id) if game is not None else None
        if found is not None:
            finished.append((found[1], game_id, found[0]))
            assert game is not None
            rules[found[0].pool] = (dict(game.rules), game.seats)
    ratings = Ratings.of(rated for _, _, rated in sorted(finished))
    handles = {a.lower(): a for _, _, g in finished for a in g.accounts}
    accounts = []
    for key in sorted(handles):
        entries = []
        for pool, table in sorted(ratings.by_pool.items()):
            if key in table:
                r = table[key]
                entries.append(
                    {
                        "pool": pool,
                        "rules": rules[pool][0],
                        "players": rules[pool][1],
                        "mu": r.mu,
                        "sigma": r.sigma,
                        "rating": r.rating,
                        "games": r.games,
                        "provisional": r.provisional,
                    }
                )
        accounts.append({"handle": handles[key], "ratings": entries})
    print(json.dumps({"games": len(finished), "accounts": accounts}, indent=2))
    return 0


def _is_ledger(data: bytes) -> bool:
    """A ledger's lines carry a ``seq``; an export's first line is its header."""
    first = next((line for line in data.splitlines() if line.strip()), b"")
    try:
        parsed = jsondoc.loads(first)  # nesting bounded: a RecursionError is no answer
    except ValueError:
        return False
    return isinstance(parsed, dict) and "seq" in parsed and "type" in parsed


def _ratings_of_ledger(name: str, data: bytes) -> int:
    """The ledger folded in seq order (``LedgerFold``, as the server folds it)."""
    fold = LedgerFold()
    lines = [line for line in data.splitlines() if line.strip()]
    for number, line in enumerate(lines, start=1):
        try:
            fold.apply(jsondoc.loads(line))
        except ValueError as exc:  # MalformedJson is one: nesting bounded
            print(f"{name}: entry {number}: not a ratings ledger's line: {exc}", file=sys.stderr)
            return 2
    accounts = []
    for key in sorted(fold.handles):
        entries = []
        for pool, table in sorted(fold.ratings.by_pool.items()):
            if key in table:
                r = table[key]
                entries.append(
                    {
                        "pool": pool,
                        "players": int(pool.split("p-", 1)[0]),
                        "mu": r.mu,
                        "sigma": r.sigma,
                        "rating": r.rating,
                        "games": r.games,
                        "provisional": r.provisional,
                    }
                )
        accounts.append(
            {"handle": fold.handles[key], "excluded": key in fold.excluded, "ratings": entries}
        )
    print(
        json.dumps(
            {
                "entries": len(lines),
                "games": fold.results,
                "skipped": fold.skips,
                "excluded": sorted(fold.excluded),
                "accounts": accounts,
            },
            indent=2,
        )
    )
    return 0


def cmd_accounts(args: argparse.Namespace) -> int:
    """``exclude`` / ``reinstate`` HANDLE --reason TEXT: an operator's moderation, recorded as an
    event on the account in the configured store (docs/ratings.md, "Moderation")."""
    runtime = Runtime(Settings.from_env(), create_tables=True)
    try:
        try:
            account = runtime.accounts.moderate(
                args.handle, exclude=args.action == "exclude", reason=args.reason
            )
        except (ApplicationError, DomainError) as exc:
            print(f"cantstop: {exc}", file=sys.stderr)
            return 1
        with contextlib.suppress(Exception):  # the ledger shows it now; else at the next poll
            runtime.views.catch_up(runtime.ratings)
        if account.excluded:  # never paired again in a tournament (issue #45)
            runtime.tournaments.withdraw_everywhere(account.handle, "excluded")
        print(
            json.dumps(
                {
                    "handle": account.handle,
                    "excluded": account.excluded,
                    "at": format_at(account.modified_on),
                    "reason": account.moderation_reason,
                }
            )
        )
        return 0
    finally:
        runtime.close()


def _verified_export(path: str, what: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | int:
    """An export's header and events, if it verifies; else the exit status, its reason
    printed. What is made from the events as the rules wrote them (a sheet, an analysis) is
    not made from one that does not verify (forged or damaged): its rows could say anything,
    or nothing readable."""
    try:
        header, records = read_export(path)
    except Unreadable as exc:
        print(exc, file=sys.stderr)
        return 2
    verdict = audit_records(records)
    if not verdict["valid"]:
        print(
            f"{path}: the game does not verify (first bad version "
            f"{verdict['first_bad_version']}; `cantstop audit` tells why): no {what}",
            file=sys.stderr,
        )
        return 1
    return header, records


def cmd_sheet(args: argparse.Namespace) -> int:
    """A record sheet from an exported game, offline."""
    verified = _verified_export(args.file, "sheet")
    if isinstance(verified, int):
        return verified
    header, records = verified
    seats = records[0]["data"]["seats"]  # GameCreated: the audit has read it
    if args.seat is None and seats > 1:
        print(
            f"{args.file}: a game of {seats} players has one sheet per player: add --seat S",
            file=sys.stderr,
        )
        return 2
    try:
        sheet = record_sheet(records, args.seat or 0, game_id=header.get("game_id"))
    except (InvalidRequest, ValueError, KeyError, TypeError) as exc:
        print(f"{args.file}: cannot make a sheet: {exc}", file=sys.stderr)
        return 2
    if args.format == "pdf":
        sys.stdout.buffer.write(render_pdf(sheet))
    elif args.format == "csv":
        sys.stdout.write(render_csv(sheet))
    else:
        sys.stdout.write(render_text(sheet))
    return 0


def cmd_analyse(args: argparse.Namespace) -> int:
    """The analysis of an exported game, offline: the same JSON as ``/analysis``. An export
    that does not verify gets none (exit 1), as a sheet gets none: its events could say
    anything."""
    verified = _verified_export(args.file, "analysis")
    if isinstance(verified, int):
        return verified
    _header, records = verified
    try:
        with collector.paused():
            analysis = analyse(records, args.version)
    except ValueError as exc:  # a version the export does not reach
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    except AnalysisRefused as exc:  # verified above: only if the audit and rules disagree
        print(f"{args.file}: no analysis: {exc.detail}", file=sys.stderr)
        return 1
    print(json.dumps(analysis, indent=2, ensure_ascii=False))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Create the tables if missing: at any time, even as hosts start (they take turns)."""
    Runtime(Settings.from_env(), create_tables=True).close()
    print("tables ready", file=sys.stderr)
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """A consistent copy of the SQLite store while it serves (docs/reliability.md)."""
    settings = Settings.from_env()
    source = sqlite_path(settings.database_url)
    if source is None:
        print(
            "cantstop: backup copies a SQLite store; back PostgreSQL up with pg_dump "
            "(docs/reliability.md, Backups)",
            file=sys.stderr,
        )
        return 2
    try:
        size = backup_sqlite(source, Path(args.destination))
    except BackupError as exc:
        print(f"cantstop: {exc}", file=sys.stderr)
        return 1
    print(f"backed up {source} to {args.destination} ({size} bytes)", file=sys.stderr)
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    """``thin``: delete the snapshots of the games finished before they were thinned out as
    they finish, but every ``Store.KEPT_WHEN_FINISHED``-th (docs/scaling.md, "Bytes per
    game"); safe while the service runs."""
    runtime = Runtime(Settings.from_env(), create_tables=True)
    try:
        found = runtime.games.store.thin_out_finished()
    finally:
        runtime.close()
    print(f"snapshots of {found} finished game(s) thinned out", file=sys.stderr)
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    """Archive the finished games queued at least ``--after`` seconds ago (the setting's delay
    by default; 0: every one queued), now, as the scheduler does a few at a time (service/
    application/games/archiving.py): the views are caught up first, as a game is archived only
    once every view has read it. Safe while the service runs."""
    settings = Settings.from_env()
    runtime = Runtime(settings, create_tables=True)
    if args.restore:
        return _restore_archived(runtime)
    after = settings.archive_after if args.after is None else args.after
    if after is None:
        print("cantstop: archiving is off (CANTSTOP_ARCHIVE_AFTER=off)", file=sys.stderr)
        runtime.close()
        return 2
    try:
        for view in runtime.all_views():
            runtime.views.catch_up(view)
        runtime.archiver.after = after
        totals = runtime.archiver.drain()
    finally:
        runtime.close()
    print(f"finished games: {_counted(totals) or 'none queued'}", file=sys.stderr)
    return 0


def _counted(totals: dict[str, int]) -> str:
    """``3 archived, 1 the newest``: each outcome and how many games ended with it."""
    return ", ".join(f"{count} {outcome}" for outcome, count in sorted(totals.items()))


def _restore_archived(runtime: Runtime) -> int:
    """``cantstop archive --restore``: every archived game's rows put back where they were in
    the log (before going back to a release that does not read archives; set
    CANTSTOP_ARCHIVE_AFTER=off first, or the worker archives them again as they come due)."""
    final: dict[uuid.UUID, str] = {}  # each game's last outcome
    try:
        for view in runtime.all_views():
            runtime.views.catch_up(view)
        while True:
            store = runtime.games.store
            outcomes = {game_id: store.restore(game_id) for game_id in store.archived(500)}
            final.update(outcomes)
            if "restored" not in outcomes.values():
                break
    finally:
        runtime.close()
    totals: dict[str, int] = {}
    for outcome in final.values():
        totals[outcome] = totals.get(outcome, 0) + 1
    print(f"archived games: {_counted(totals) or 'none'}", file=sys.stderr)
    return 0 if set(totals) <= {"restored"} else 1


def cmd_projections(args: argparse.Namespace) -> int:
    """``status``: each view's place in the log and whether its code changed. ``rebuild
    [NAME]``: fill a new generation of the view(s) from the log while the service keeps answering
    from the old one, then switch (service/persistence/views.py)."""
    runtime = Runtime(Settings.from_env(), create_tables=True)
    try:
        views = {view.name: view for view in runtime.all_views()}
        if args.name is not None and args.name not in views:
            print(
                f"cantstop: no view {args.name!r}; the views are {', '.join(views)}",
                file=sys.stderr,
            )
            return 2
        chosen = [views[args.name]] if args.name else list(views.values())
        if args.action == "status":
            for view in chosen:
                track = runtime.views.tracking(view)
                note = runtime.views.stale(view) or "current"
                print(
                    f"{view.name}: version {track.version}, generation {track.generation}, "
                    f"at {tuple(track.position)}: {note}"
                )
            return 0
        end = runtime.views.end()
        for view in chosen:
            with tqdm(
                total=end.id or None,
                desc=view.name,
                unit=" events",
                file=sys.stderr,
                disable=not sys.stderr.isatty(),
            ) as bar:

                def shown(position: Any, bar: Any = bar) -> None:
                    bar.n = min(position.id, bar.total or position.id)
                    bar.refresh()

                applied = runtime.views.rebuild(view, progress=shown)
            print(f"{view.name}: rebuilt from {applied} events", file=sys.stderr)
        return 0
    finally:
        runtime.close()


WORKER_NICENESS = 10


def cmd_worker(args: argparse.Namespace) -> int:
    """Record what happens without a request — turns that time out, computer players' turns,
    abandoned games — until SIGTERM or SIGINT (service/application/games/scheduler.py), and keep
    the analysis processes running (service/application/analysis/jobs.py)."""
    # People's requests come first on a shared host: computer players' thinking yields the CPU
    # to the HTTP workers (a timeout due in 3 s needs milliseconds, so it is never starved).
    os.nice(WORKER_NICENESS)
    runtime = Runtime(Settings.from_env(), create_tables=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The analyses run in child processes of this one (never in its threads: it is never
    # starved), each replaced when it passes its memory budget (analysis_jobs.Supervisor).
    analysts = Supervisor(
        lambda: ProcessGroup._start(ANALYST_COMMAND),
        runtime.analyst.config.workers,
        runtime.analyst.jobs,
    )
    scheduler = runtime.scheduler()
    scheduler.chores = (*scheduler.chores, analysts.step)
    try:
        scheduler.run(stop)
    finally:
        analysts.close()
        runtime.close()
    return 0


ANALYST_COMMAND = [sys.executable, "-m", "service.cli", "analyst"]
ANALYST_NICENESS = 5  # on top of the worker's: the scheduler's loop comes first


def cmd_analyst(args: argparse.Namespace) -> int:
    """One analysis worker process (``cantstop worker`` starts them): jobs from the queue
    until SIGTERM, or until it passes its memory budget (then its parent starts another)."""
    os.nice(ANALYST_NICENESS)
    runtime = Runtime(Settings.from_env(), create_tables=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    worker = runtime.analyst.worker()
    try:
        arm_cpu_limit(runtime.analyst.config)
        why = worker.run(stop, between=lambda: arm_cpu_limit(runtime.analyst.config))
    finally:
        runtime.close()
    print(f"cantstop analyst {worker.name}: {why} after {worker.done} jobs", file=sys.stderr)
    return 0


class ProcessGroup:
    """``cantstop serve`` with the scheduler on: two children, the HTTP server (gunicorn) and
    one ``cantstop worker``. A worker that dies is started again; a signal to stop is passed to
    both; when the HTTP server ends, the worker is stopped and the server's status returned. The
    children die with this process (Linux ``PR_SET_PDEATHSIG``), even after a ``kill -9``."""

    RESTART_PAUSE = 0.5

    def __init__(self, http: list[str]) -> None:
        self.http_command = http
        self.worker_command = [sys.executable, "-m", "service.cli", "worker"]
        self.stopping = False

    def run(self) -> int:
        http = self._start(self.http_command)
        worker = self._start(self.worker_command)

        def stop(signum: int, _frame: Any) -> None:
            self.stopping = True
            for child in (http, worker):
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        while (code := http.poll()) is None:
            if worker.poll() is not None and not self.stopping:
                print(
                    f"cantstop: the scheduler exited ({worker.returncode}); restarting",
                    file=sys.stderr,
                )
                time.sleep(self.RESTART_PAUSE)
                worker = self._start(self.worker_command)
            time.sleep(0.2)
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
        return code

    @staticmethod
    def _start(command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    """In the child, before exec: Linux sends it SIGTERM when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def metrics_folder(environ: MutableMapping[str, str]) -> str:
    """Where every process of this server writes its metrics (prometheus_client's multiprocess
    mode, service/metrics.py): PROMETHEUS_MULTIPROC_DIR if set, emptied of an earlier run's
    files (their counts would be summed in), else a new temporary folder."""
    folder = environ.get(metrics.MULTIPROC_DIR) or ""
    if folder:
        os.makedirs(folder, exist_ok=True)
        for old in Path(folder).glob("*.db"):
            old.unlink(missing_ok=True)
    else:
        folder = environ[metrics.MULTIPROC_DIR] = tempfile.mkdtemp(prefix="cantstop-metrics-")
        owner = os.getpid()  # not a forked gunicorn worker leaving: the server itself

        def remove() -> None:
            if os.getpid() == owner:
                shutil.rmtree(folder, ignore_errors=True)

        atexit.register(remove)
    return folder


def cmd_serve(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    ServerSettings.from_env()  # gunicorn reads these too; refuse a bad one here, in one line
    JobConfig.from_env(os.environ)  # so do the workers (CANTSTOP_ANALYSIS_*)
    LiveConfig.from_env()
    if settings.metrics and not args.http_only:  # before any process imports prometheus_client
        metrics_folder(os.environ)
    if not args.http_only:  # (--http-only: started by the process group, which did this)
        # Create the tables once, before any worker starts: workers never race to create them.
        Runtime(settings, create_tables=True).close()
    if settings.scheduler and not args.http_only:  # CANTSTOP_SCHEDULER=off: it runs elsewhere
        http = [sys.executable, "-m", "service.cli", "serve", "--http-only"]
        for flag, value in (
            ("--host", args.host),
            ("--port", args.port),
            ("--workers", args.workers),
        ):
            if value is not None:
                http += [flag, str(value)]
        return ProcessGroup(http).run()

    class Server(BaseApplication):  # type: ignore[misc]  # gunicorn's documented custom app
        def load_config(self) -> None:
            from service import gunicorn_settings

            for name in self.cfg.settings:  # the settings the module sets
                if hasattr(gunicorn_settings, name):
                    self.cfg.set(name, getattr(gunicorn_settings, name))
            if args.host is not None or args.port is not None:  # else CANTSTOP_BIND
                host, _, port = self.cfg.bind[0].rpartition(":")
                self.cfg.set("bind", f"{args.host or host}:{args.port or port}")
            if args.workers is not None:
                self.cfg.set("workers", args.workers)

        def load(self) -> Any:
            from service.wsgi import app

            return app

    Server().run()
    return 0


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (else a one-line usage error,
    exit 2, as a bad CANTSTOP_* setting gets)."""

    def parse(raw: str) -> int:
        if not raw.strip().isascii() or not raw.strip().isdigit() or not low <= int(raw) <= high:
            raise argparse.ArgumentTypeError(f"a whole number from {low} to {high}, not {raw!r}")
        return int(raw)

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cantstop", description="The Can't Stop game service.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the HTTP API through gunicorn")
    serve.add_argument("--host", default=None, help="default: CANTSTOP_BIND or 127.0.0.1:8000")
    serve.add_argument("--port", type=bounded(1, 65535), default=None)
    serve.add_argument(
        "--workers", type=bounded(1, 256), default=None, help="worker processes (default 2)"
    )
    serve.add_argument("--http-only", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="create missing tables (safe as hosts start)")
    migrate.set_defaults(func=cmd_migrate)

    worker = sub.add_parser(
        "worker",
        help="record timeouts, computer players' turns and abandoned games; run the analyses",
    )
    worker.set_defaults(func=cmd_worker)
    analyst = sub.add_parser(
        "analyst", help="one analysis worker process (cantstop worker starts them)"
    )
    analyst.set_defaults(func=cmd_analyst)

    backup = sub.add_parser(
        "backup", help="copy the SQLite store while it serves (PostgreSQL: pg_dump)"
    )
    backup.add_argument("destination", help="the backup's file (must not exist)")
    backup.set_defaults(func=cmd_backup)

    proj = sub.add_parser(
        "projections", help="the views kept in the store: their status, or rebuild them"
    )
    proj.add_argument("action", choices=("status", "rebuild"))
    proj.add_argument("name", nargs="?", help="one view (default: all)")
    proj.set_defaults(func=cmd_projections)

    snaps = sub.add_parser(
        "snapshots", help="delete the snapshots finished games no longer need (older stores)"
    )
    snaps.add_argument("action", choices=("thin",))
    snaps.set_defaults(func=cmd_snapshots)

    arch = sub.add_parser(
        "archive", help="keep finished games' events as one archived value each, now"
    )
    arch.add_argument(
        "--after", type=float, metavar="SECONDS", help="queued at least this long ago"
    )
    arch.add_argument(
        "--restore",
        action="store_true",
        help="put every archived game back into rows (before going back to a release before)",
    )
    arch.set_defaults(func=cmd_archive)

    arena_cli.add_parser(sub)

    ver = sub.add_parser("verify", help="check game transcripts offline")
    ver.add_argument("--trace", action="store_true", help="include the state after every action")
    ver.add_argument("files", nargs="+", metavar="FILE", help="transcript JSON files; - for stdin")
    ver.set_defaults(func=cmd_verify)

    rat = sub.add_parser(
        "ratings", help="recompute every account's ratings from a saved ratings ledger, offline"
    )
    rat.add_argument(
        "file",
        help="a saved GET /v1/ratings/ledger (every page); or exports, which agree with the "
        "server only if they hold every rated game of every account in them and of their "
        "opponents",
    )
    rat.set_defaults(func=cmd_ratings)

    acc = sub.add_parser(
        "accounts", help="exclude an account from the ratings, or reinstate it (operator)"
    )
    acc_actions = acc.add_subparsers(dest="action", required=True)
    for action, what in (
        ("exclude", "its rated results stop counting from now on"),
        ("reinstate", "its rated results count again from now on"),
    ):
        moderation = acc_actions.add_parser(action, help=what)
        moderation.add_argument("handle")
        moderation.add_argument("--reason", required=True, help="shown in the ratings ledger")
        moderation.set_defaults(func=cmd_accounts)

    aud = sub.add_parser("audit", help="check a game's or a tournament's export offline")
    aud.add_argument("--receipt", help="a saved receipt (or a saved action answer) to check too")
    aud.add_argument("--keys", help="a saved answer of GET /v1/keys, to check the receipt with")
    aud.add_argument("--games", help="a tournament's table games: their exports, one after another")
    aud.add_argument(
        "file", metavar="FILE", help="a game's or a tournament's export (NDJSON); - for stdin"
    )
    aud.set_defaults(func=cmd_audit)

    sheet = sub.add_parser("sheet", help="a turn record sheet from an exported game")
    sheet.add_argument("file", metavar="FILE", help="an export (NDJSON) from /export; - for stdin")
    sheet.add_argument("--format", choices=["text", "csv", "pdf"], default="text")
    sheet.add_argument(
        "--seat", type=int, default=None, help="the player: needed in a multiplayer game"
    )
    sheet.set_defaults(func=cmd_sheet)

    ana = sub.add_parser(
        "analyse", help="luck and skill in an exported game, by the expert (as /analysis)"
    )
    ana.add_argument("file", metavar="FILE", help="an export (NDJSON) from /export; - for stdin")
    ana.add_argument("--version", type=bounded(1, 100_000), default=None, help="up to this version")
    ana.set_defaults(func=cmd_analyse)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if ServerSettings.log_format_of(os.environ) == "json":  # CANTSTOP_LOG_FORMAT
            logformat.use_json()
        result = args.func(args)
    except ConfigError as exc:  # a bad setting: one line, not a traceback
        print(f"cantstop: {exc}", file=sys.stderr)
        return 2
    except (StoreUnavailable, PersistenceError) as exc:  # at start: the database cannot be used
        reason = postgres_connect_error(Settings.from_env()) or root_cause(exc)
        print(
            f"cantstop: the database (CANTSTOP_DATABASE_URL) cannot be used: {reason}",
            file=sys.stderr,
        )
        return 1
    assert isinstance(result, int)
    return result


def root_cause(exc: BaseException) -> str:
    """The first line of the innermost exception behind ``exc`` (psycopg's, under the
    library's): what a person can act on, such as 'database "x" does not exist'."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
