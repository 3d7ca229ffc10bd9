"""The Flask app factory: one ``Runtime`` per process, the blueprints, every error as problem+json.

The top of the HTTP layer: it imports the blueprints, which import ``service.http.core`` and the
application below them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask import Flask, Request, Response, request
from flask.sessions import NullSession, SessionInterface, SessionMixin
from flask.signals import (
    appcontext_tearing_down,
    request_finished,
    request_started,
    request_tearing_down,
)
from flask.typing import ResponseReturnValue
from flask_cors import CORS
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, MapAdapter, Rule, UnicodeConverter

from service.config import Settings
from service.http import limits, meta, metrics
from service.http.accounts import accounts_api
from service.http.analysis import analysis_api
from service.http.audit import audit_api
from service.http.bots import bots_api
from service.http.core import (
    LATER,
    GameIdConverter,
    install_error_handlers,
    request_class,
    this_request,
)
from service.http.fairplay import fair_play_api
from service.http.games import games_api
from service.http.matchmaking import matchmaking_api
from service.http.pages import pages
from service.http.sheets import sheets_api
from service.http.stream import stream_api
from service.http.tournaments import tournaments_api
from service.http.transcripts import transcripts_api
from service.http.webhooks import webhooks_api
from service.runtime import Runtime

CORS_ALLOW_HEADERS = [
    "Authorization",
    "Content-Type",
    "If-Match",
    "If-None-Match",
    "Idempotency-Key",
    "Last-Event-ID",
    "X-Request-Id",
]
CORS_EXPOSE_HEADERS = [
    "ETag",
    "Location",
    "Retry-After",
    "Idempotent-Replayed",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-Request-Id",
]


class NoSessions(SessionInterface):
    """No cookie sessions (the service has none, and no secret key): every request shares one
    empty, read-only session (Flask's ``NullSession``, which refuses any change), and nothing is
    saved. Flask's default builds a new one on every request, work for no reader
    (docs/performance.md (levers))."""

    null = NullSession()

    def open_session(self, app: Flask, request: Request) -> SessionMixin:
        return self.null

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        return None


ACTION_RULE = "/v1/games/<game_id>/actions"  # http/games.py ``act``
ACTION_PATH = re.compile(r"/v1/games/([^/]+)/actions")  # what that rule's segment matches


SITES_KEPT = 64  # bindings of distinct sites (Host, scheme, script name) kept by a map


def wsgi_text(value: str) -> str:
    """A WSGI environ's text as Werkzeug reads it (latin-1 code units of UTF-8 bytes)."""
    return value.encode("latin1").decode(errors="replace")


class Routes(Map):
    """Werkzeug's map, whose adapters match an action's request (the hot path) by one regular
    expression before the general matcher (``ActionFirst``), and are bound to a request with
    what its site binds to worked out once per site: Werkzeug works out the host, scheme,
    subdomain and script name afresh for every request, the same each time."""

    action: Rule | None = None  # the action's rule, once looked up; None: no fast path
    looked = False  # looked up (at the first request's match: the rules are all added by then)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sites: dict[tuple[Any, ...], tuple[str, str, str | None, str]] = {}

    def bind_to_environ(
        self, environ: Any, server_name: str | None = None, subdomain: str | None = None
    ) -> MapAdapter:
        env = getattr(environ, "environ", environ)  # a request, or its environ (as Werkzeug)
        get = env.get
        site = (
            server_name,
            subdomain,
            get("wsgi.url_scheme"),
            get("HTTP_HOST"),
            get("SERVER_NAME"),
            get("SERVER_PORT"),
            get("SCRIPT_NAME"),
            get("HTTP_CONNECTION"),
            get("HTTP_UPGRADE"),
        )  # all that Werkzeug's binding reads but the path, the query and the method
        bound = self.sites.get(site)
        if bound is None:
            adapter = super().bind_to_environ(environ, server_name, subdomain)
            bound = (
                adapter.server_name,
                adapter.script_name,
                adapter.subdomain,
                adapter.url_scheme,
            )
            if len(self.sites) >= SITES_KEPT:
                self.sites.clear()
            self.sites[site] = bound
            path, query = adapter.path_info, adapter.query_args
        else:
            path = get("PATH_INFO")
            path = "/" if path is None else wsgi_text(path)
            query = get("QUERY_STRING")
            if query is not None:
                query = wsgi_text(query)
        host, script, sub, scheme = bound  # (never read back: another thread may clear them)
        return ActionFirst(self, host, script, sub, scheme, path, env["REQUEST_METHOD"], query)

    def action_rule(self) -> Rule | None:
        """The action's rule, if the fast path gives exactly what the general matcher would:
        a rule of its own endpoint, with no defaults, no redirect, no host or subdomain, and
        its segment by the default converter (any text without a slash)."""
        if not self.looked:
            self.looked = True
            rules = [r for r in self.iter_rules() if r.rule == ACTION_RULE]
            if len(rules) == 1 and len(list(self.iter_rules(rules[0].endpoint))) == 1:
                rule = rules[0]
                plain = (
                    not rule.defaults
                    and rule.redirect_to is None
                    and not rule.host
                    and not rule.subdomain
                    and not rule.websocket
                    and not self.host_matching
                    and rule.methods is not None
                    and "POST" in rule.methods
                    and rule.arguments == {"game_id"}
                    and self.converters.get("default") is UnicodeConverter  # [^/]{1,}
                )
                if plain:
                    self.action = rule
        return self.action


class ActionFirst(MapAdapter):
    """A bound map (``Routes``) that matches ``POST /v1/games/<game_id>/actions`` by a regular
    expression: the same rule and arguments as Werkzeug's state machine, which walks the map's
    tree of 76 rules part by part (docs/performance.md, levers). Anything else, including an
    action's path with another method, goes the general way."""

    def match(
        self,
        path_info: str | None = None,
        method: str | None = None,
        return_rule: bool = False,
        query_args: Any = None,
        websocket: bool | None = None,
    ) -> Any:
        if (
            return_rule
            and path_info is None
            and method is None
            and websocket is None
            and self.default_method == "POST"
            and not self.websocket
            and not self.subdomain
        ):
            found = ACTION_PATH.fullmatch(self.path_info)
            if found is not None:
                routes = self.map
                rule = routes.action_rule() if isinstance(routes, Routes) else None
                if rule is not None:
                    return rule, {"game_id": found[1]}
        general: Any = super().match
        return general(path_info, method, return_rule, query_args, websocket)


class App(Flask):
    """Flask, answering OPTIONS (without CORS) with 204 and ``Allow``: Flask's own answer is
    an empty 200 labelled text/html; and raising a request's own refusal (``request_class``:
    a doubled slash, an over-long request line or header block) in place of its view, once
    routing has found the route (a path that names nothing is 404 first, as in Flask)."""

    url_map_class = Routes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.synced_views: dict[Callable[..., Any], Callable[..., Any]] = {}  # view: as called
        self.dispatched = False  # a request went Flask's whole way (it notes the first one)
        self.hooked: dict[str, bool] = {}  # endpoint: after-request functions registered?

    def create_url_adapter(self, request: Request | None) -> MapAdapter | None:
        """Flask's, without working out the request's host when no trusted hosts are
        configured: Flask sets ``request.host`` then only to what Werkzeug's ``host`` gives on
        first read (the same ``get_host`` of the same environ), and the binding below works
        the site out itself (``Routes.bind_to_environ``, once per site)."""
        config = self.config
        if (
            request is None
            or config["TRUSTED_HOSTS"] is not None
            or self.url_map.host_matching
            or self.subdomain_matching
        ):
            return super().create_url_adapter(request)
        return self.url_map.bind_to_environ(
            request.environ,
            server_name=config["SERVER_NAME"],
            subdomain=self.url_map.default_subdomain or "",
        )

    def full_dispatch_request(self) -> Response:
        """Flask's, without sending ``request_started`` to nobody (after the first request,
        which goes Flask's way: it notes that the app has started)."""
        if not self.dispatched or request_started.receivers:
            self.dispatched = True
            return super().full_dispatch_request()
        try:
            rv = self.preprocess_request()
            if rv is None:
                rv = self.dispatch_request()
        except Exception as e:
            rv = self.handle_user_exception(e)
        return self.finalize_request(rv)

    def finalize_request(
        self, rv: ResponseReturnValue | HTTPException, from_error_handler: bool = False
    ) -> Response:
        """Flask's, without sending ``request_finished`` to nobody."""
        if request_finished.receivers:
            return super().finalize_request(rv, from_error_handler)
        response = self.make_response(rv)
        try:
            response = self.process_response(response)
        except Exception:
            if not from_error_handler:
                raise
            self.logger.exception("Request finalizing failed with an error while handling an error")
        return response

    def dispatch_request(self) -> ResponseReturnValue:
        """Flask's, written out on the request object taken once, each view's ``ensure_sync``
        (a check of its code's flags) worked out once per view, not per request."""
        req = this_request()
        if req.routing_exception is not None:
            self.raise_routing_exception(req)
        refusal = getattr(req, "refusal", None)  # (a request class of our own has it)
        if refusal is not None:
            raise refusal
        rule: Any = req.url_rule
        if getattr(rule, "provide_automatic_options", False) and req.method == "OPTIONS":
            return self.make_default_options_response()
        view = self.view_functions[rule.endpoint]
        call = self.synced_views.get(view)
        if call is None:
            call = self.synced_views[view] = self.ensure_sync(view)
        return call(**(req.view_args or {}))  # type: ignore[no-any-return]

    # Flask's request hooks, run only when something is registered to them: with nothing
    # registered each still works out the request's blueprints, walks its lists and sends its
    # signal to nobody, on every request (docs/performance.md, levers).
    def preprocess_request(self) -> ResponseReturnValue | None:
        if self.before_request_funcs or self.url_value_preprocessors:
            return super().preprocess_request()
        return None

    def do_teardown_request(self, *exc: BaseException | None) -> None:
        if self.teardown_request_funcs or request_tearing_down.receivers:
            super().do_teardown_request(*exc)

    def do_teardown_appcontext(self, *exc: BaseException | None) -> None:
        if self.teardown_appcontext_funcs or appcontext_tearing_down.receivers:
            super().do_teardown_appcontext(*exc)

    def process_response(self, response: Response) -> Response:
        """Flask's, skipped when it has nothing to do: no function given to
        ``after_this_request`` (``core.after_this_request`` notes one), none registered for the
        request's blueprints or the app (worked out once per endpoint: Flask refuses new ones
        once it has served a request), and no session to save (``NoSessions``). Flask walks its
        lists and works the blueprints out on every request."""
        req = this_request()
        rule = req.url_rule
        if (
            rule is None
            or LATER in req.environ
            or not isinstance(self.session_interface, NoSessions)
        ):
            return super().process_response(response)
        hooked = self.hooked.get(rule.endpoint)
        if hooked is None:
            names = (*req.blueprints, None)
            hooked = self.hooked[rule.endpoint] = any(
                self.after_request_funcs.get(name) for name in names
            )
        return super().process_response(response) if hooked else response

    def make_default_options_response(self) -> Response:
        response = super().make_default_options_response()
        response.status_code = 204
        del response.headers["Content-Type"]
        return response


def create_app(settings: Settings | None = None, *, create_tables: bool = False) -> Flask:
    settings = settings or Settings.from_env()
    app = App("cantstop")
    app.session_interface = NoSessions()
    # A path with doubled slashes names no resource (404), as any other unknown path: Werkzeug
    # answered it with a 308 redirect, an HTML page, to the Host the client sent.
    app.url_map.merge_slashes = False
    app.url_map.converters["game"] = GameIdConverter  # before the routes that use it
    app.request_class = request_class(
        max_body_bytes=settings.max_body_bytes,
        max_line=settings.max_uri_bytes,
        max_headers=settings.max_header_bytes,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["cantstop"] = Runtime(settings, create_tables=create_tables)
    metrics.init_app(app, settings)  # X-Request-Id; /metrics if CANTSTOP_METRICS=on: first hooks

    meta.register(app)  # /healthz, /openapi.yaml, /docs
    app.register_blueprint(pages)  # /: the lobby or the JSON index; game, replay pages
    app.register_blueprint(games_api)  # seed commitments, games, players, actions, history
    app.register_blueprint(transcripts_api)  # transcripts
    app.register_blueprint(stream_api)  # live events
    app.register_blueprint(audit_api)  # audit, export, import, board.svg
    app.register_blueprint(sheets_api)  # record sheets, leaderboard
    app.register_blueprint(bots_api)  # computer players, advice
    app.register_blueprint(analysis_api)  # luck and skill, by the expert
    app.register_blueprint(accounts_api)  # accounts, tokens, profiles, histories, ratings
    app.register_blueprint(fair_play_api)  # an account's fair-play figures
    app.register_blueprint(webhooks_api)  # an account's webhooks and their deliveries
    app.register_blueprint(matchmaking_api)  # challenges, seeks
    app.register_blueprint(tournaments_api)  # tournaments, their players and standings
    limits.init_app(app, settings)  # CANTSTOP_RATE_LIMITS, on the routes registered above
    if settings.cors_origins:  # CANTSTOP_CORS_ORIGINS: off unless asked for
        CORS(
            app,
            resources={r"/v1/*": {"origins": list(settings.cors_origins)}},
            allow_headers=CORS_ALLOW_HEADERS,
            expose_headers=CORS_EXPOSE_HEADERS,
            methods=["GET", "HEAD", "POST", "DELETE", "OPTIONS"],  # what the API's routes take
            max_age=600,
        )
        if "*" not in settings.cors_origins:
            # The CORS headers are sent to the listed origins only, so an answer depends on
            # Origin even with one origin listed (flask-cors says so only for several).
            @app.after_request
            def _vary_by_origin(response: Response) -> Response:
                if request.path.startswith("/v1/"):
                    response.vary.add("Origin")
                return response

    install_error_handlers(app)
    return app
