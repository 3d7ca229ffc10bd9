"""The Dockerfile, deploy/docker-compose.yml and the gunicorn settings refer to things that exist.

Docker cannot run here (no daemon, and no registry to pull ``python:3.11-slim`` from); these checks
catch what breaks deployment files silently: a COPY of a file that moved, a command that is not
installed, a health check on a route that does not exist, an environment variable that nothing
reads, and (the image's install step run on what its COPY lines copy) a file the service reads at
run time that the installed package lacks.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from flask import Flask

from service import cli
from service.config import ConfigError, ServerSettings, Settings
from service.http.app import create_app
from service.live.hub import LiveConfig
from service.persistence.settings import persistence_env
from tests.support.http import HOST, send
from tests.support.servers import free_port, serving

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
GUNICORN_CONF = ROOT / "service" / "gunicorn_settings.py"


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined: list[str] = []
    current = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        joined.append(current + line)
        current = ""
    result = []
    for text in joined:
        keyword, _, rest = text.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def dockerignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(path, p) or path.split("/")[0] == p for p in patterns)


def project_env_names() -> set[str]:
    """Every CANTSTOP_* variable the service or the gunicorn settings read."""
    sources = sorted((ROOT / "service").rglob("*.py"))
    names: set[str] = set()
    for source in sources:
        names |= set(re.findall(r"\"(CANTSTOP_[A-Z0-9_]+)\"", source.read_text(encoding="utf-8")))
    return names


def load_gunicorn_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gunicorn_conf_under_test", GUNICORN_CONF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def flask_app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    database = tmp_path_factory.mktemp("deploy") / "routes.sqlite"
    app = create_app(Settings(database_url=f"sqlite:///{database}"), create_tables=True)
    yield app
    app.extensions["cantstop"].close()


def route_exists(app: Flask, path: str) -> bool:
    adapter = app.url_map.bind("localhost")
    try:
        adapter.match(path, method="GET")
    except Exception:
        return False
    return True


# ------------------------------------------------------------------------------ Dockerfile
def test_the_image_is_python_3_11_slim_and_runs_as_a_user() -> None:
    steps = instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any("useradd" in args and users[-1] in args for k, args in steps if k == "RUN")


def test_every_copy_source_exists_and_is_not_dockerignored() -> None:
    copies = [args for keyword, args in instructions() if keyword == "COPY"]
    assert copies
    for args in copies:
        *sources, _destination = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the project"
            assert not dockerignored(source), f"COPY {source} is excluded by .dockerignore"


def test_the_image_holds_what_the_service_reads_at_run_time() -> None:
    copied = {
        source.rstrip("/")
        for keyword, args in instructions()
        if keyword == "COPY"
        for source in shlex.split(args)[:-1]
    }
    # The gunicorn settings are part of the service package (imported by `cantstop serve`);
    # openapi.yaml goes into the wheel through the link service/http/openapi.yaml, which needs
    # the file beside pyproject.toml.
    assert GUNICORN_CONF.is_relative_to(ROOT / "service")
    assert "openapi.yaml" in copied
    assert {"domain", "service", "pyproject.toml"} <= copied
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "readme"
    ]
    assert readme in copied  # setuptools needs it to build


def test_the_command_is_the_declared_console_script_serving_on_all_interfaces() -> None:
    commands = [exec_form(args) for keyword, args in instructions() if keyword == "CMD"]
    assert len(commands) == 1
    program, *arguments = commands[0]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    assert program in scripts and scripts[program] == "service.cli:main"
    parsed = cli.build_parser().parse_args(arguments)
    assert parsed.func is cli.cmd_serve
    assert (parsed.host, parsed.port) == ("0.0.0.0", 8000)
    exposed = [args for keyword, args in instructions() if keyword == "EXPOSE"]
    assert exposed == [str(parsed.port)]


def test_the_healthcheck_asks_a_real_route_with_the_standard_library(flask_app: Flask) -> None:
    checks = [args for keyword, args in instructions() if keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    _options, _, command = checks[0].partition("CMD ")
    program, flag, code = exec_form(command)
    assert (program, flag) == ("python", "-c")
    compile(code, "<healthcheck>", "exec")
    assert "urllib.request" in code and "curl" not in code
    url = urlsplit(re.findall(r"'(http://[^']+)'", code)[0])
    assert url.port == 8000
    assert route_exists(flask_app, url.path), url.path
    assert flask_app.test_client().get(url.path).status_code == 200


def image_context(into: Path) -> Path:
    """What the Dockerfile's COPY lines put into its WORKDIR, copied into ``into`` as Docker
    copies it (symbolic links kept as links; what .dockerignore excludes left out)."""
    into.mkdir()
    ignored = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for keyword, args in instructions():
        if keyword != "COPY":
            continue
        *sources, destination = shlex.split(args)
        for source in sources:
            assert destination in ("./", f"./{source}"), f"COPY {args}: a destination to map"
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, into / source, symlinks=True, ignore=ignored)
            else:
                shutil.copy2(ROOT / source, into / source)
    return into


@pytest.mark.slow
def test_the_image_install_step_builds_a_package_that_serves_the_api_and_the_pages(
    tmp_path: Path,
) -> None:
    """Docker cannot build the image here. This runs the image's install step (``pip install
    .``, as a wheel) on exactly what its COPY lines copy, and serves the installed package from
    outside the source tree: a file the service reads at run time but the package does not
    carry (a template, a script of the pages, the OpenAPI document) fails here."""
    context = image_context(tmp_path / "context")
    dist, site = tmp_path / "dist", tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("cantstop-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        packaged = set(archive.namelist())
        linked = archive.getinfo("service/http/openapi.yaml")  # a link in the source tree
        assert not stat.S_ISLNK(linked.external_attr >> 16), "openapi.yaml is a link in the wheel"
    # Every file of the two packages is in the wheel (openapi.yaml as a file, not a link).
    sources = {
        path.relative_to(ROOT).as_posix()
        for package in ("domain", "service")
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert sources - packaged == set()

    env = {"PYTHONPATH": str(site)}  # ahead of this checkout's editable install
    where = subprocess.run(
        [sys.executable, "-c", "import domain, service; print(domain.__file__, service.__file__)"],
        env={**os.environ, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(module).is_relative_to(site) for module in where), where
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env=env, ready_port=port):
        lobby = send(port, "GET", "/", headers={"Accept": "text/html"})
        assert lobby.status == 200 and lobby.content_type == "text/html", lobby.headers
        # The page's own files, and the scripts its scripts import, one by one.
        assets = re.findall(r'(?:src|href)="(/assets/[^"]+)"', lobby.body.decode())
        assert any(asset.endswith(".js") for asset in assets), assets
        fetched: set[str] = set()
        while assets:
            asset = assets.pop()
            reply = send(port, "GET", asset)
            assert reply.status == 200, asset
            fetched.add(asset)
            if asset.endswith(".js"):
                folder = asset.rsplit("/", 1)[0]
                imported = re.findall(r'from "\./([\w./-]+\.js)"', reply.body.decode())
                assets += [
                    f"{folder}/{name}" for name in imported if f"{folder}/{name}" not in fetched
                ]
        assert "/assets/js/api.js" in fetched, fetched
        spec = send(port, "GET", "/openapi.yaml")
        assert spec.status == 200 and spec.body == (ROOT / "openapi.yaml").read_bytes()
        created = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]})
        assert created.status == 201, created.body[:300]
        game = created.json()["game"]["id"]
        page = send(port, "GET", f"/games/{game}", headers={"Accept": "text/html"})
        assert page.status == 200 and page.content_type == "text/html", page.body[:300]


# ---------------------------------------------------------------------------- gunicorn.conf
def test_gunicorn_settings_import_and_use_the_services_threaded_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gunicorn.workers.base import Worker

    from service.server import ServiceWorker

    monkeypatch.delenv("CANTSTOP_THREADS", raising=False)
    monkeypatch.setenv("CANTSTOP_WORKERS", "3")
    conf = load_gunicorn_conf()
    # The service's own worker, on gunicorn's documented Worker base class: it owns its
    # connections, so a stream's socket is handed to the live loop through no private part.
    assert conf.worker_class == "service.server.ServiceWorker"
    assert issubclass(ServiceWorker, Worker)
    assert conf.threads >= 32
    assert conf.workers == 3
    assert conf.worker_connections > conf.threads
    assert conf.preload_app is False  # the Application is built in each worker, after the fork
    assert conf.wsgi_app == "service.wsgi:app"
    assert callable(conf.post_fork) and callable(conf.worker_int) and callable(conf.on_starting)
    assert callable(conf.pre_fork) and callable(conf.child_exit)


def test_workers_are_pinned_only_to_cpus_the_server_has_to_itself(tmp_path: Path) -> None:
    conf = load_gunicorn_conf()
    assert ServerSettings.from_env({}).cpu_affinity == "off"  # opt-in
    assert ServerSettings.from_env({"CANTSTOP_CPU_AFFINITY": "AUTO"}).cpu_affinity == "auto"
    with pytest.raises(ValueError, match="CANTSTOP_CPU_AFFINITY"):
        ServerSettings.from_env({"CANTSTOP_CPU_AFFINITY": "yes"})
    pinned = conf.pinned_cpus
    assert pinned("auto", {0, 1}, None, 2) == [0, 1]
    assert pinned("auto", {3, 1}, None, 4) == [1, 3]  # more workers than CPUs: shared out
    assert pinned("auto", range(8), None, 2) is None  # 2 workers on 8 CPUs: others run there
    assert pinned("auto", {0, 1}, 1.5, 2) is None  # a quota: CPUs shared with other cgroups
    assert pinned("auto", {0, 1}, 2.0, 2) == [0, 1]
    assert pinned("on", range(8), 1.0, 2) == list(range(8))
    assert pinned("off", {0, 1}, None, 2) is None
    assert pinned("on", {0}, None, 2) is None  # one CPU: nothing to choose
    # A new worker takes the CPU fewest live workers keep to (a restarted one takes its gap).
    assert conf.least_taken([0, 1], []) == 0
    assert conf.least_taken([0, 1], [0]) == 1
    assert conf.least_taken([0, 1, 2], [0, 1, None, 2, 0]) == 1
    # The quota, from cgroup v2 or v1 files.
    assert conf.cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert conf.cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert conf.cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert conf.cpu_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    assert conf.cpu_quota(tmp_path) == 4.0


def test_gunicorn_start_hook_refuses_a_bad_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = load_gunicorn_conf()
    monkeypatch.setenv("CANTSTOP_RATE_LIMITS", "create=lots")
    with pytest.raises(ValueError, match="CANTSTOP_RATE_LIMITS"):
        conf.on_starting(None)


# ---------------------------------------------------------------------------------- compose
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def api_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if "build" in service and "command" not in service
    }


def test_compose_runs_two_api_hosts_on_postgres_16_and_redis_7(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgres"]["image"] == "postgres:16"
    assert services["redis"]["image"] == "redis:7"
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"], name
    apis = api_services(compose)
    assert len(apis) >= 2
    for name, service in apis.items():
        context = (COMPOSE.parent / service["build"]["context"]).resolve()
        assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
        for needed in ("postgres", "redis"):
            assert service["depends_on"][needed]["condition"] == "service_healthy", name
        assert any(str(port).endswith(":8000") for port in service["ports"]), name


def test_compose_sets_only_variables_the_project_reads(compose: dict[str, Any]) -> None:
    known = project_env_names()
    assert {"CANTSTOP_DATABASE_URL", "CANTSTOP_REDIS_URL"} <= known
    for name, service in compose["services"].items():
        names = {key for key in service.get("environment", {}) if key.startswith("CANTSTOP_")}
        assert names <= known, (name, names - known)
    for name, service in api_services(compose).items():
        env = {key: str(value) for key, value in service["environment"].items()}
        assert {"CANTSTOP_DATABASE_URL", "CANTSTOP_REDIS_URL"} <= env.keys(), name
        settings = Settings.from_env(env)
        assert (
            persistence_env(settings, create_table=False)["POSTGRES_HOST"] in (compose["services"])
        )
        assert urlsplit(settings.redis_url or "").hostname in compose["services"]
        LiveConfig.from_env(env)


def test_compose_creates_the_tables_once_before_the_api_hosts(compose: dict[str, Any]) -> None:
    migrate = compose["services"]["migrate"]
    program, *arguments = migrate["command"]
    assert program in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert cli.build_parser().parse_args(arguments).func is cli.cmd_migrate
    for service in api_services(compose).values():
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("args", [["--workers", "0"], ["--workers", "-3"], ["--port", "99999"]])
def test_serve_refuses_bad_flags_in_one_line_as_it_refuses_bad_settings(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # --workers 0 once started a server of no worker that never answered; --port 99999 ended
    # in a traceback.
    with pytest.raises(SystemExit) as stopped:
        cli.build_parser().parse_args(["serve", *args])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a whole number from 1 to" in error and args[0] in error


def test_a_database_that_cannot_be_reached_at_start_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens on port 1: the connection is refused at once.
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    assert cli.main(["migrate"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "CANTSTOP_DATABASE_URL" in error[0], error


def test_an_access_log_that_cannot_be_written_is_a_bad_setting(tmp_path: Path) -> None:
    # gunicorn's own refusal named no variable.
    with pytest.raises(ConfigError, match="CANTSTOP_ACCESS_LOG"):
        ServerSettings.from_env({"CANTSTOP_ACCESS_LOG": str(tmp_path / "missing" / "access.log")})
    for value, expected in (
        ("-", "-"),
        ("", None),
        (str(tmp_path / "a.log"), str(tmp_path / "a.log")),
    ):
        assert ServerSettings.from_env({"CANTSTOP_ACCESS_LOG": value}).access_log == expected


def test_a_database_that_does_not_exist_is_named_in_libpqs_words(
    postgres_server_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The library's pool says only 'couldn't get a connection after 1.00 sec'; the line says
    what a person can act on, as libpq has it."""
    head, sep, query = postgres_server_url.partition("?")
    missing = f"{head.rpartition('/')[0]}/no_such_database{sep}{query}"
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", missing)
    assert cli.main(["migrate"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1, error
    assert "CANTSTOP_DATABASE_URL" in error[0]
    assert 'database "no_such_database" does not exist' in error[0], error
