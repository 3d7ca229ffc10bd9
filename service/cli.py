"""The ``cantstop`` command: serve the API, verify transcripts offline."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from domain.transcript import MalformedTranscript, verify

DEPLOY_CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "gunicorn.conf.py"


class Unreadable(Exception):
    """Input that cannot be judged at all: exit status 2 with a one-line reason."""


def read_json(name: str) -> Any:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable(f"{name}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"{name}: not JSON: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    worst = 0
    several = len(args.files) > 1
    for name in args.files:
        try:
            verdict = verify(read_json(name), trace=args.trace)
        except Unreadable as exc:
            print(str(exc).splitlines()[0], file=sys.stderr)
            worst = 2
            continue
        except MalformedTranscript as exc:
            print(f"{name}: malformed transcript: {exc}", file=sys.stderr)
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
    from domain.audit import MalformedExport, parse_export

    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return parse_export(data)
    except MalformedExport as exc:
        raise Unreadable(f"{name}: not a game export: {exc}") from None


def cmd_audit(args: argparse.Namespace) -> int:
    """Audit a game export offline (no server, no database): the same JSON as ``/audit``."""
    from domain.audit import audit_records

    try:
        _, records = read_export(args.file)
    except Unreadable as exc:
        print(exc, file=sys.stderr)
        return 2
    verdict = audit_records(records)
    print(json.dumps(verdict, indent=2, ensure_ascii=False))
    return 0 if verdict["valid"] else 1


def cmd_sheet(args: argparse.Namespace) -> int:
    """A record sheet from an exported game, offline."""
    from domain.errors import InvalidRequest
    from domain.record_sheet import record_sheet
    from service.sheet_render import render_csv, render_pdf, render_text

    try:
        header, records = read_export(args.file)
        sheet = record_sheet(records, args.seat, game_id=header.get("game_id"))
    except Unreadable as exc:
        print(exc, file=sys.stderr)
        return 2
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


def cmd_migrate(args: argparse.Namespace) -> int:
    """Create the tables (if missing) once, e.g. before several API hosts start."""
    from service.app import Runtime
    from service.config import Settings

    Runtime(Settings.from_env(), create_tables=True).close()
    print("tables ready", file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from gunicorn.app.base import Application  # has load_config_from_file

    from service.app import Runtime
    from service.config import Settings

    settings = Settings.from_env()
    # Create the tables once, here, before any worker starts: workers never race to create them.
    Runtime(settings, create_tables=True).close()

    class Server(Application):  # type: ignore[misc]
        def load_config(self) -> None:
            self.load_config_from_file(str(DEPLOY_CONFIG))
            self.cfg.set("bind", f"{args.host}:{args.port}")
            if args.workers is not None:
                self.cfg.set("workers", args.workers)

        def load(self) -> Any:
            from service.wsgi import app

            return app

    Server().run()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cantstop", description="The Can't Stop game service.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the HTTP API through gunicorn")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=None, help="worker processes (default 2)")
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="create the tables once (before several hosts start)")
    migrate.set_defaults(func=cmd_migrate)

    ver = sub.add_parser("verify", help="check game transcripts offline")
    ver.add_argument("--trace", action="store_true", help="include the state after every action")
    ver.add_argument("files", nargs="+", metavar="FILE", help="transcript JSON files; - for stdin")
    ver.set_defaults(func=cmd_verify)

    aud = sub.add_parser("audit", help="check a game export offline (chain, rules, dice)")
    aud.add_argument("file", metavar="FILE", help="an export (NDJSON) from /export; - for stdin")
    aud.set_defaults(func=cmd_audit)

    sheet = sub.add_parser("sheet", help="a turn record sheet from an exported game")
    sheet.add_argument("file", metavar="FILE", help="an export (NDJSON) from /export; - for stdin")
    sheet.add_argument("--format", choices=["text", "csv", "pdf"], default="text")
    sheet.add_argument("--seat", type=int, default=0, help="the player, in a multiplayer game")
    sheet.set_defaults(func=cmd_sheet)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    assert isinstance(result, int)
    return result


if __name__ == "__main__":
    sys.exit(main())
