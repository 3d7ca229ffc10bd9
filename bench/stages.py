"""Where an action's instructions go, stage by stage, in one or more source trees.

`bench/instructions.py` counts an action's instructions as a whole. This splits them: each tree
plays the same games (the same player, seed and fixed string hashing) under
`valgrind --tool=callgrind`, with the action path's functions called through a tiny C module of
its own (built here with gcc) that has one symbol per stage, so callgrind's inclusive cost of
that symbol is the stage's instructions. Only the main thread's action requests are split (a
game's creation, background threads and the bench's own client are the "rest"). Then one pass
of the tree's `cantstop worker` loop (the views kept in the store, timeouts, its chores) over
everything played: its share of an action is the "worker" row.

| stage | the functions it counts (both trees have them) |
|---|---|
| parse | `http.games.action_command` (parsed once per distinct body), `required_versions` |
| auth | `Seats.authenticate` (imported?, the seat's token or the account's) |
| load | `Store._latest` (the owned game: the cache, or the store) |
| decide | `Games._apply` (If-Match, the rules, the events and their hash chain, a seed revealed) |
| store | `Store._write` (the events' stored form, the insert, a due snapshot) |
| publish | `Store._tell` (the live hub, Redis if configured) |
| views | `Views.of` (the game's state view) |
| sign | `Receipts.sign` (the action's receipt; absent before contract 1.2) |
| answer | `http.games.json_response` (the JSON body and headers) |
| app glue | `Games.act` less its stages above (the lock, the vault, the result) |
| http | the WSGI call of the action less all the above (Flask, Werkzeug, routing, the hooks) |

A stage's functions nested in another stage count in the outer one. The wrappers cost a few
thousand instructions an action, counted in "app glue" and "http": the total less the worker
is 3-5% above what `bench/instructions.py` counts.

    apt-get install -y valgrind gcc
    python -m bench.stages /tmp/before . [--actions 300] [--warmup 100] [--postgres URL]

Two runs per tree (the warm-up alone, then with the actions), the difference over the actions;
about 3 minutes a tree.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STAGES = ("parse", "auth", "load", "decide", "store", "publish", "views", "sign", "answer")
CONTAINERS = ("request", "app", "worker")  # enclose stages: never on the stack
C_SOURCE = (
    "#include <Python.h>\n"
    + "".join(
        f"__attribute__((noinline)) PyObject *stage_{name}(PyObject *self, PyObject *const *args,"
        " size_t nargsf, PyObject *kwnames) {\n"
        "  return PyObject_Vectorcall(args[0], args + 1,"
        " PyVectorcall_NARGS(nargsf) - 1, kwnames);\n"
        "}\n"
        for name in STAGES + CONTAINERS
    )
    + "static PyMethodDef methods[] = {\n"
    + "".join(
        f'  {{"{name}", (PyCFunction)(void (*)(void))stage_{name}, METH_FASTCALL | METH_KEYWORDS,'
        " NULL},\n"
        for name in STAGES + CONTAINERS
    )
    + "  {NULL, NULL, 0, NULL}};\n"
    'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cantstop_stages", NULL, -1,'
    " methods};\n"
    "PyMODINIT_FUNC PyInit__cantstop_stages(void) { return PyModule_Create(&module); }\n"
)


def build() -> Path:
    """The C module's folder (built once per source and interpreter). -O0 and no identical
    code folding: each stage keeps a symbol and a call of its own."""
    digest = hashlib.sha256((C_SOURCE + sys.version).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"cantstop-stages-{digest}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = folder / f"_cantstop_stages{suffix}"
    if target.exists():
        return folder
    folder.mkdir(exist_ok=True)
    source = folder / "stages.c"
    source.write_text(C_SOURCE)
    include = sysconfig.get_paths()["include"]
    command = ["gcc", "-shared", "-fPIC", "-O0", "-fno-ipa-icf", f"-I{include}", str(source)]
    subprocess.run([*command, "-o", str(target)], check=True)
    return folder


def load_instructions() -> Any:
    """bench/instructions.py beside this file (its player and its PostgreSQL databases), also
    when this file runs as a script."""
    spec = importlib.util.spec_from_file_location("bench_instructions", HERE / "instructions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ in the tree
def instrument(stages: Any) -> Callable[[bool], None]:
    """Route the action path's functions through the stage symbols; the switch returned turns
    the split on for the main thread's action requests only."""
    from service.http import games as http_games

    try:
        app_games: Any = importlib.import_module("service.application.games.use_cases")
        seats: Any = importlib.import_module("service.application.games.seats").Seats
        store: Any = importlib.import_module("service.application.store").Store
    except ImportError:  # before the contexts (#42): one Games class in application/games.py
        app_games = importlib.import_module("service.application.games")
        seats = store = app_games.Games

    main = threading.get_ident()
    on = [False]
    stack: list[str] = []

    def wrap(owner: Any, name: str, stage: str) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        trampoline = getattr(stages, stage)

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not on[0] or stack or threading.get_ident() != main:
                return original(*args, **kwargs)
            stack.append(stage)
            try:
                return trampoline(original, *args, **kwargs)
            finally:
                stack.pop()

        setattr(owner, name, wrapped)

    def contain(owner: Any, name: str, container: str) -> None:
        original = owner.__dict__[name]
        trampoline = getattr(stages, container)

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not on[0] or threading.get_ident() != main:
                return original(*args, **kwargs)
            return trampoline(original, *args, **kwargs)

        setattr(owner, name, wrapped)

    wrap(http_games, "action_command", "parse")
    wrap(http_games, "required_versions", "parse")
    wrap(http_games, "json_response", "answer")
    wrap(seats, "authenticate", "auth")
    wrap(store, "_latest", "load")
    wrap(app_games.Games, "_apply", "decide")
    wrap(store, "_write", "store")
    wrap(store, "_tell", "publish")
    wrap(app_games.Views, "of", "views")
    contain(app_games.Games, "act", "app")
    try:
        from service.application.games.receipts import Receipts
    except ImportError:  # before contract 1.2
        pass
    else:
        wrap(Receipts, "sign", "sign")

    def switch(value: bool) -> None:
        on[0] = value

    return switch


def play(actions: int) -> None:
    """In the tree's process: the bench's games, each action request through ``request``."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # http is not http
    sys.path.insert(0, os.environ["CANTSTOP_STAGES_MODULE"])
    import _cantstop_stages  # type: ignore[import-not-found]  # built by build()

    instructions = load_instructions()
    clients: list[Any] = []
    around = instrument_later(_cantstop_stages)

    def keep(client: Any) -> None:
        clients.append(client)
        around(client)

    instructions.play(actions, around=keep)
    # One pass of the tree's `cantstop worker` over everything played: the views kept in the
    # store, due timeouts and the chores, as its loop does them between two polls.
    scheduler = clients[0].app.__wrapped_app__.extensions["cantstop"].scheduler()
    _cantstop_stages.worker(scheduler.run, OnePass())


class OnePass:
    """A stop event for the scheduler's loop: one pass, no wait."""

    def __init__(self) -> None:
        self.asked = 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > 1

    def wait(self, timeout: float | None = None) -> bool:
        return True


def instrument_later(stages: Any) -> Callable[[Any], None]:
    """The hook ``instructions.play`` calls with its WSGI client once the app is built."""

    def around(client: Any) -> None:
        switch = instrument(stages)
        app = client.app

        def through(environ: Any, start_response: Any) -> Any:
            if not environ["PATH_INFO"].endswith("/actions"):
                return app(environ, start_response)
            switch(True)
            try:
                return stages.request(lambda: list(app(environ, start_response)))
            finally:
                switch(False)

        through.__wrapped_app__ = app  # type: ignore[attr-defined]
        client.app = through

    return around


# ------------------------------------------------------------------------------ the referee
def run(tree: Path, actions: int, module: Path, postgres: str | None) -> dict[str, int]:
    """Inclusive instructions of each stage symbol, and the whole run's (``total``)."""
    fresh_database = load_instructions().fresh_database

    with tempfile.TemporaryDirectory(prefix="cantstop-stages-") as out:
        outfile = Path(out) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={outfile}",
            sys.executable,
            __file__,
            "--play",
            str(actions),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(tree.resolve()),
            "PYTHONHASHSEED": "0",
            "CANTSTOP_STAGES_MODULE": str(module),
        }
        env.pop("CANTSTOP_DATABASE_URL", None)
        with fresh_database(postgres) as url:
            if url is not None:
                env["CANTSTOP_DATABASE_URL"] = url
            done = subprocess.run(
                command, env=env, cwd=tree, capture_output=True, text=True, check=False
            )
        if done.returncode != 0 or not outfile.exists():
            raise SystemExit(f"{tree}: the run failed\n{done.stderr[-2000:]}")
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(outfile)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    found = {"total": 0}
    for line in annotated.splitlines():
        total = re.match(r"\s*([\d,]+)\s+(\(\s*[\d.]+%\)\s+)?PROGRAM TOTALS", line)
        if total:
            found["total"] = int(total.group(1).replace(",", ""))
        stage = re.match(r"\s*([\d,]+)\s+(\(\s*[\d.]+%\)\s+)?\S*:stage_(\w+)\b", line)
        if stage:
            found[stage.group(3)] = found.get(stage.group(3), 0) + int(
                stage.group(1).replace(",", "")
            )
    return found


def split(tree: Path, args: argparse.Namespace, module: Path) -> dict[str, float]:
    longer = run(tree, args.warmup + args.actions, module, args.postgres)
    shorter = run(tree, args.warmup, module, args.postgres)
    per = {k: (longer.get(k, 0) - shorter.get(k, 0)) / args.actions for k in longer}
    rows = {name: per.get(name, 0.0) for name in STAGES}
    rows["app glue"] = per.get("app", 0.0) - sum(
        rows[s] for s in ("load", "decide", "store", "publish", "views")
    )
    rows["http"] = (
        per.get("request", 0.0)
        - per.get("app", 0.0)
        - sum(rows[s] for s in ("parse", "auth", "sign", "answer"))
    )
    rows["action request"] = per.get("request", 0.0)
    rows["worker"] = per.get("worker", 0.0)
    rows["rest"] = per["total"] - per.get("request", 0.0) - per.get("worker", 0.0)
    rows["total"] = per["total"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path)
    parser.add_argument("--actions", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--postgres", metavar="URL", help="as bench/instructions.py's")
    parser.add_argument("--play", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.play is not None:
        play(args.play)
        return
    if not args.trees:
        parser.error("give one or more source trees")
    for tool in ("valgrind", "callgrind_annotate", "gcc"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install -y valgrind gcc")
    module = build()
    columns = [split(tree, args, module) for tree in args.trees]
    names = [str(t) for t in args.trees]
    print("instructions per action, by stage")
    print(f"{'stage':<16}" + "".join(f"{n[-24:]:>26}" for n in names))
    for row in columns[0]:
        cells = "".join(f"{c[row]:>26,.0f}" for c in columns)
        if len(columns) > 1 and columns[0][row]:
            cells += f"   ({columns[-1][row] - columns[0][row]:+,.0f})"
        print(f"{row:<16}{cells}")


if __name__ == "__main__":
    main()
