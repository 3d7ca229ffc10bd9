"""gunicorn settings used by `cantstop serve` (and so by the Dockerfile), shipped in the package.

The workers are the service's own (service/server.py, through gunicorn's documented
``worker_class`` setting): each answers requests on a pool of ``threads`` threads (128 by
default), which mostly wait (on the database, on Redis), and hands a server-sent-event stream's
connection to its live hub, one asyncio loop that holds every stream of the worker
(service/live/hub.py): a stream holds no thread. A worker holds up to CANTSTOP_STREAM_MAX
streams (8,000) and CANTSTOP_STREAM_MAX_PER_CLIENT per client address (500), and its open-file
limit is raised to the hard limit so that its sockets fit.

Workers (`cantstop serve --workers N`, or CANTSTOP_WORKERS): about one per CPU core, since the GIL
keeps a process's Python on one core; more workers means more PostgreSQL connections:
workers x (CANTSTOP_PG_POOL_SIZE + CANTSTOP_PG_MAX_OVERFLOW) per host.

Each worker builds its own eventsourcing Application after the fork (preload_app stays off); the
tables were created once by `cantstop serve` before starting. When a worker is told to stop, it
ends its streams at once rather than holding the restart for graceful_timeout; clients
reconnect with Last-Event-ID and miss nothing. Values come from the environment variables below.

CPU affinity (CANTSTOP_CPU_AFFINITY, ``off`` by default): with ``auto`` or ``on``, each worker keeps
to one CPU, the one fewest live workers keep to when it starts. A worker's threads take turns at
the GIL, and each time one lets go of it (a socket, an SQLite call, a contended lock) another
takes it, on whichever CPU the kernel woke it: the interpreter's data then moves between the
cores' caches. Kept to one CPU, the service and the hello-world alike served more actions per
second at less CPU per action, so the ratio between them did not move (docs/performance.md
(levers)). ``auto`` pins only a server that has its CPUs to itself: at least as many workers as
the CPUs it may run on (``taskset``, a cpuset), and no CPU quota below them (a container's
``--cpus``: cgroup ``cpu.max`` or ``cpu.cfs_quota_us``); elsewhere (2 workers on a 64-core host,
other servers beside it) pinning would tie every server's first worker to CPU 0. ``on`` pins
anyway. It stays off by default: a pinned worker cannot move away from a core that something
else keeps busy; measure it on the host first. The `cantstop worker` process (clocks, bots) is
never pinned.
"""

import contextlib
import logging
import os
import resource
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gunicorn import glogging

from service import logformat, metrics
from service.config import ServerSettings, Settings
from service.live.hub import LiveConfig

_server = ServerSettings.from_env()
bind = _server.bind
wsgi_app = "service.wsgi:app"
workers = _server.workers
worker_class = "service.server.ServiceWorker"
threads = _server.threads
# Open connections per worker, idle keep-alive ones included (streams, the hub's, not counted);
# must stay above threads.
worker_connections = max(1000, 2 * threads)
preload_app = False
# No gunicorn control socket (gunicorn >= 27): unused here, and one default path per user would be
# shared by every server on the host.
control_socket_disable = True
timeout = 60
graceful_timeout = 10
keepalive = 5
accesslog = _server.access_log  # CANTSTOP_ACCESS_LOG empty: no access log
# CANTSTOP_LOG_FORMAT=json: gunicorn's own lines and the access log as JSON objects, through
# gunicorn's documented logger_class setting (service/logformat.py).
if _server.log_format == "json":
    logger_class = logformat.json_logger(glogging.Logger)
errorlog = "-"
loglevel = _server.log_level
# The worker writes the access log itself (service/server.py): never the request headers
# (Authorization carries seat tokens), and only the API's own query values.


def on_starting(server: Any) -> None:
    """In the master, before any worker: a typo in the configuration stops the start, loudly."""
    Settings.from_env()
    LiveConfig.from_env()


def cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """How many CPUs' worth of time this process's cgroup may use, if a quota is set (cgroup
    v2 ``cpu.max``, v1 ``cpu/cpu.cfs_quota_us``); None without one."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def pinned_cpus(
    setting: str, allowed: Iterable[int], quota: float | None, workers: int
) -> list[int] | None:
    """The CPUs the workers are pinned to, one each (CANTSTOP_CPU_AFFINITY); None: not pinned.
    ``auto`` pins only a server that has the CPUs to itself: as many workers as the CPUs it
    may run on, or more, and no CPU quota below them."""
    cpus = sorted(allowed)
    if setting == "off" or len(cpus) < 2:
        return None
    if setting == "auto" and (workers < len(cpus) or (quota is not None and quota < len(cpus))):
        return None  # the CPUs are shared (other servers, a container's quota): the kernel
    return cpus


def least_taken(cpus: list[int], taken: Iterable[int | None]) -> int:
    """The CPU of ``cpus`` that the fewest live workers keep to (the first of those)."""
    counts = dict.fromkeys(cpus, 0)
    for cpu in taken:
        if cpu in counts:
            counts[cpu] += 1
    return min(cpus, key=counts.__getitem__)


_cpus = pinned_cpus(_server.cpu_affinity, os.sched_getaffinity(0), cpu_quota(), workers)


# In the master: the CPU of each live worker (by the worker object's id), kept by the
# documented hooks pre_fork and child_exit.
_cpu_of: dict[int, int] = {}


def pre_fork(server: Any, worker: Any) -> None:
    """In the master, before a worker is forked: the CPU it will keep to (``post_fork``)."""
    if _cpus is not None:
        worker.cantstop_cpu = least_taken(_cpus, _cpu_of.values())
        _cpu_of[id(worker)] = worker.cantstop_cpu


def child_exit(server: Any, worker: Any) -> None:
    """In the master, once a worker has exited: its CPU is free, and its live gauges stop
    counting (service/metrics.py)."""
    _cpu_of.pop(id(worker), None)
    metrics.process_dead(worker.pid)


def post_fork(server: Any, worker: Any) -> None:
    """Keep the worker to its CPU (``pre_fork``; its threads, started later, inherit it), and
    tell it as many open files as the system lets it (each stream is a socket)."""
    cpu = getattr(worker, "cantstop_cpu", None)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:  # a sandbox may refuse: the worker runs unpinned
            logging.getLogger("cantstop").warning("worker not kept to CPU %s: %s", cpu, exc)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def worker_int(worker: Any) -> None:
    """SIGINT / SIGQUIT: the quick shutdown; end the streams so the worker can exit at once
    (SIGTERM: the worker's handle_exit, service/server.py)."""
    end_streams = getattr(worker, "end_streams", None)
    if end_streams is not None:
        end_streams()
