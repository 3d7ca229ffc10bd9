"""Configuration from the environment (README: Configuration), checked in one place.

Every ``CANTSTOP_*`` value is read and validated with the helpers here, most of them by
``Settings``; the live streams' ``CANTSTOP_STREAM_*`` by ``LiveConfig`` (service/live/hub.py),
and the store reads back what ``persistence_env`` hands it. A bad value is a ``ConfigError``
whose message is one line naming the variable, which ``cantstop`` prints before exiting with
status 2.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_DATABASE_URL = "sqlite:///var/cantstop.sqlite"
DEFAULT_MAX_BODY_BYTES = 256 * 1024
SCOPES = ("create", "action", "audit", "signin", "challenge", "tournament", "webhook", "bots")
# Sign-up and sign-in are always limited (guessing passwords), per handle and per client, unless
# CANTSTOP_RATE_LIMITS names signin itself; so are challenges, per challenged account (a flood
# of challenges to one account), unless it names challenge.
DEFAULT_SIGNIN = "signin=10/minute"
DEFAULT_CHALLENGE = "challenge=20/minute"
# Whole-history work (audits, exports, analyses, imports) is limited per client unless
# CANTSTOP_RATE_LIMITS names audit (contract 1.3: imports are limited by default).
DEFAULT_AUDIT = "audit=120/minute"
# Creating tournaments is limited per account unless CANTSTOP_RATE_LIMITS names tournament.
DEFAULT_TOURNAMENT = "tournament=10/hour"
# Creating webhooks (each looks a host name up) is limited per account, three times the cap of
# 10 webhooks an hour, unless CANTSTOP_RATE_LIMITS names webhook.
DEFAULT_WEBHOOK = "webhook=30/hour"
# Games that get a computer player are limited per client, unless CANTSTOP_RATE_LIMITS names
# bots: the server plays every bot turn itself, so one request for a game of bots costs the
# host's worker a whole game (~140 ms of CPU and ~140 events for two experts), not one action.
DEFAULT_BOTS = "bots=60/hour"
UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
UNITS |= {"d": 86400, "day": 86400}
RULE = re.compile(r"^(?P<scope>[a-z_]+)=(?P<count>\d{1,9})/(?P<n>\d{0,6})(?P<unit>[a-z]+)$")


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one line naming the variable."""


# ------------------------------------------------------------------------------ readers
def _num(value: float) -> str:
    """A bound as people write it: 1048576, not 1.04858e+06."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def env_number(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    low: float = 0,
    high: float = math.inf,
    integer: bool = False,
) -> float:
    """``env[name]`` as a number from ``low`` to ``high`` (``default`` when unset or empty)."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    kind = "a whole number" if integer else "a number"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, not {raw!r}") from None
    if not math.isfinite(value) or not low <= value <= high:
        bound = f"at least {_num(low)}" if high == math.inf else f"from {_num(low)} to {_num(high)}"
        raise ConfigError(f"{name} must be {kind} {bound}, not {raw!r}")
    return value


def env_int(
    env: Mapping[str, str], name: str, default: int, *, low: int = 0, high: float = math.inf
) -> int:
    return int(env_number(env, name, default, low=low, high=high, integer=True))


def env_choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = (env.get(name) or "").strip().lower() or default
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return raw


@dataclass(frozen=True)
class Limit:
    """``count`` requests per ``period`` seconds, for one scope."""

    scope: str
    count: int
    period: int

    def __str__(self) -> str:
        return f"{self.scope}={self.count}/{self.period}s"


def parse_limits(text: str | None) -> dict[str, Limit]:
    """``CANTSTOP_RATE_LIMITS``: ``create=30/minute,action=120/minute`` → {scope: Limit};
    ``off`` or empty → {}. Periods: ``[N]second|minute|hour|day`` (or ``s``, ``m``, ``h``,
    ``d``)."""
    text = (text or "").strip().lower()
    if text in ("", "off", "none"):
        return {}
    name = "CANTSTOP_RATE_LIMITS"
    limits: dict[str, Limit] = {}
    for part in text.split(","):
        part = part.strip().replace(" ", "")
        match = RULE.match(part)
        if match is None:
            raise ConfigError(
                f"{name}: {part!r} is not <scope>=<count>/<period>, "
                "e.g. create=30/minute,action=120/minute (or off)"
            )
        scope, unit = match["scope"], match["unit"]
        if scope not in SCOPES:
            raise ConfigError(f"{name}: unknown scope {scope!r}; use {' or '.join(SCOPES)}")
        seconds = UNITS.get(unit) or UNITS.get(unit.removesuffix("s"))
        if seconds is None:
            raise ConfigError(
                f"{name}: unknown period {match['unit']!r}; use second, minute, hour or day"
            )
        period = int(match["n"] or 1) * seconds
        count = int(match["count"])
        if count < 1 or period < 1:
            raise ConfigError(f"{name}: {part!r} must allow at least 1 request")
        if scope in limits:
            raise ConfigError(f"{name}: {scope!r} is given twice")
        limits[scope] = Limit(scope, count, period)
    return limits


def check_database_url(url: str) -> str:
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or not url[len("sqlite:///") :]:
            raise ConfigError(
                "CANTSTOP_DATABASE_URL: a sqlite URL needs a file path: sqlite:///var/cantstop.sqlite"
            )
    elif scheme not in ("postgresql", "postgres"):
        raise ConfigError(
            f"CANTSTOP_DATABASE_URL must start with sqlite:/// or postgresql://, not {scheme!r}"
        )
    return url


def check_redis_url(url: str | None) -> str | None:
    if url is not None and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            "CANTSTOP_REDIS_URL must start with redis://, rediss:// or unix://, not "
            f"{urlsplit(url).scheme!r}"
        )
    return url


def parse_origins(text: str | None) -> tuple[str, ...]:
    """``CANTSTOP_CORS_ORIGINS``: ``*`` or a comma-separated list of origins; empty: CORS off."""
    origins = tuple(o.strip() for o in (text or "").split(",") if o.strip())
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise ConfigError(
                f"CANTSTOP_CORS_ORIGINS: {origin!r} is not an origin such as "
                "https://app.example (scheme and host, no path), or *"
            )
    return origins


# ------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    rate_limits: str = "off"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_uri_bytes: int = 8190
    max_header_bytes: int = 32 * 1024
    sqlite_synchronous: str = "normal"
    pg_pool_size: int = 5
    pg_max_overflow: int = 10
    pg_query_timeout: float = 10.0
    pg_idle_in_transaction: float = 5.0
    """``CANTSTOP_PG_IDLE_IN_TRANSACTION_TIMEOUT``: seconds the server lets one of the service's
    sessions sit idle inside a transaction before ending it (0: never)."""
    pg_keepalives_idle: int = 10
    """``CANTSTOP_PG_KEEPALIVES_IDLE``: seconds of silence before TCP keepalive probes start on
    the service's connections (5 s apart, 3 of them: a dead peer is found within ~25 s)."""
    cors_origins: tuple[str, ...] = ()
    abandon_after: float = 7 * 24 * 3600
    archive_after: float | None = 24 * 3600
    """``CANTSTOP_ARCHIVE_AFTER``: seconds after a game finished before its events are kept as
    one archived value (service/application/games/archiving.py); ``off``: never."""
    bot_pause: float = 0.5
    scheduler: bool = True
    metrics: bool = False
    """``CANTSTOP_METRICS``: ``on`` serves ``GET /metrics`` (service/http/metrics.py)."""
    metrics_token: str | None = None
    """``CANTSTOP_METRICS_TOKEN``: if set, /metrics asks for it as a bearer token."""
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_database_url(self.database_url)
        check_redis_url(self.redis_url)
        parse_limits(self.rate_limits)

    @property
    def limits(self) -> dict[str, Limit]:
        defaults = parse_limits(
            f"{DEFAULT_SIGNIN},{DEFAULT_CHALLENGE},{DEFAULT_AUDIT},{DEFAULT_TOURNAMENT},"
            f"{DEFAULT_WEBHOOK},{DEFAULT_BOTS}"
        )
        return defaults | parse_limits(self.rate_limits)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            database_url=(env.get("CANTSTOP_DATABASE_URL") or "").strip() or DEFAULT_DATABASE_URL,
            redis_url=(env.get("CANTSTOP_REDIS_URL") or "").strip() or None,
            rate_limits=env.get("CANTSTOP_RATE_LIMITS") or "off",
            max_body_bytes=env_int(
                env, "CANTSTOP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, low=1024, high=2**30
            ),
            max_uri_bytes=env_int(env, "CANTSTOP_MAX_URI_BYTES", 8190, low=256, high=2**20),
            max_header_bytes=env_int(
                env, "CANTSTOP_MAX_HEADER_BYTES", 32 * 1024, low=1024, high=2**20
            ),
            sqlite_synchronous=env_choice(
                env, "CANTSTOP_SQLITE_SYNCHRONOUS", "normal", ("normal", "full")
            ),
            pg_pool_size=env_int(env, "CANTSTOP_PG_POOL_SIZE", 5, low=1, high=1000),
            pg_max_overflow=env_int(env, "CANTSTOP_PG_MAX_OVERFLOW", 10, low=0, high=1000),
            pg_query_timeout=env_number(env, "CANTSTOP_PG_QUERY_TIMEOUT", 10.0, low=0, high=86400),
            pg_idle_in_transaction=env_number(
                env, "CANTSTOP_PG_IDLE_IN_TRANSACTION_TIMEOUT", 5.0, low=0, high=86400
            ),
            pg_keepalives_idle=env_int(env, "CANTSTOP_PG_KEEPALIVES_IDLE", 10, low=1, high=7200),
            cors_origins=parse_origins(env.get("CANTSTOP_CORS_ORIGINS")),
            abandon_after=env_int(
                env, "CANTSTOP_ABANDON_AFTER", 7 * 24 * 3600, low=1, high=10 * 365 * 86400
            ),
            archive_after=archive_after(env),
            bot_pause=env_number(env, "CANTSTOP_BOT_PAUSE", 0.5, low=0, high=60),
            scheduler=env_choice(env, "CANTSTOP_SCHEDULER", "on", ("on", "off")) == "on",
            metrics=env_choice(env, "CANTSTOP_METRICS", "off", ("off", "on")) == "on",
            metrics_token=metrics_token(env.get("CANTSTOP_METRICS_TOKEN")),
        )


def archive_after(env: Mapping[str, str]) -> float | None:
    """``CANTSTOP_ARCHIVE_AFTER``: ``off``, or seconds (a day by default)."""
    if (env.get("CANTSTOP_ARCHIVE_AFTER") or "").strip().lower() == "off":
        return None
    return env_number(env, "CANTSTOP_ARCHIVE_AFTER", 24 * 3600, low=0, high=10 * 365 * 86400)


def metrics_token(value: str | None) -> str | None:
    """``CANTSTOP_METRICS_TOKEN``: empty (none), else at least 16 printable ASCII characters
    (a header value, long enough not to be guessed)."""
    value = (value or "").strip()
    if not value:
        return None
    if len(value) < 16 or not re.fullmatch(r"[!-~]+", value):
        raise ConfigError(
            "CANTSTOP_METRICS_TOKEN must be at least 16 printable ASCII characters without "
            "spaces, or nothing"
        )
    return value


def access_log_path(value: str | None) -> str | None:
    """``CANTSTOP_ACCESS_LOG``: ``-`` (standard output), empty (off), or a file whose folder
    exists and may be written (else gunicorn stops with a line that names no variable)."""
    if value is None or value == "-":
        return value
    folder = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ConfigError(
            f"CANTSTOP_ACCESS_LOG: {value!r} cannot be written (its folder {folder!r} is "
            "missing or not writable); use -, a writable path, or nothing (off)"
        )
    return value


@dataclass(frozen=True)
class ServerSettings:
    """What gunicorn is told (service/gunicorn_settings.py); read here so that ``cantstop serve``
    refuses a bad value in one line before gunicorn starts."""

    bind: str
    workers: int
    threads: int
    access_log: str | None
    log_level: str
    cpu_affinity: str = "off"
    """``CANTSTOP_CPU_AFFINITY``: ``off`` (the kernel places the workers), ``auto`` (each
    worker keeps to one CPU when the server has its CPUs to itself) or ``on`` (always):
    service/gunicorn_settings.py."""
    log_format: str = "text"
    """``CANTSTOP_LOG_FORMAT``: ``text`` or ``json`` (one JSON object a line, access and
    application logs: service/logformat.py)."""
    read_timeout: int = 20
    """``CANTSTOP_READ_TIMEOUT``: seconds a client may send nothing in the middle of a request
    (its headers or its body) before its connection is closed (a body: 408)."""
    keepalive_time: int = 60
    """``CANTSTOP_KEEPALIVE_TIME``: seconds a connection is kept for further requests; the first
    request after them is answered with ``Connection: close``, so the client (or a proxy's
    pool of upstream connections) opens a new one, which any worker may take: the load spreads
    again over workers that started at different times (nginx's ``keepalive_time``). By age,
    not by a count of requests: a count moves the connections of the faster worker sooner."""

    @staticmethod
    def log_format_of(env: Mapping[str, str]) -> str:
        return env_choice(env, "CANTSTOP_LOG_FORMAT", "text", ("text", "json"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        env = os.environ if environ is None else environ
        bind = (env.get("CANTSTOP_BIND") or "").strip() or "127.0.0.1:8000"
        host, sep, port = bind.rpartition(":")
        if not (bind.startswith("unix:") or (sep and host and port.isdigit())):
            raise ConfigError(f"CANTSTOP_BIND must be HOST:PORT or unix:PATH, not {bind!r}")
        return cls(
            bind=bind,
            workers=env_int(env, "CANTSTOP_WORKERS", 2, low=1, high=256),
            threads=env_int(env, "CANTSTOP_THREADS", 128, low=1, high=4096),
            access_log=access_log_path(env.get("CANTSTOP_ACCESS_LOG", "-") or None),
            log_level=env_choice(
                env, "CANTSTOP_LOG_LEVEL", "info", ("debug", "info", "warning", "error", "critical")
            ),
            cpu_affinity=env_choice(env, "CANTSTOP_CPU_AFFINITY", "off", ("off", "auto", "on")),
            read_timeout=env_int(env, "CANTSTOP_READ_TIMEOUT", 20, low=1, high=3600),
            keepalive_time=env_int(env, "CANTSTOP_KEEPALIVE_TIME", 60, low=1, high=86_400),
            log_format=cls.log_format_of(env),
        )
