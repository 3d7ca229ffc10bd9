"""An account's webhooks (contract 1.2), scope ``account``: create (the secret shown once), list,
read, delete, and the log of their deliveries (service/application/notify/webhooks.py).
A creation that finds the server's lookups all taken is 503 ``webhook_lookups_busy`` with
``Retry-After`` (the URL may be good: not a 422)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, Response
from marshmallow import Schema, fields, validate

from domain.game import format_at
from service.application.notify.webhooks import EVENT_TYPES, MAX_DESCRIPTION, MAX_URL
from service.application.players.accounts import Principal
from service.http.core import bearer_token, int_arg, json_body, json_response, load, runtime
from service.http.idempotent import creates_signed_in
from service.persistence.webhooks import AttemptRow, WebhookRow

webhooks_api = Blueprint("webhooks", __name__)

NO_STORE = {"Cache-Control": "no-store"}


class WebhookRequestSchema(Schema):
    url = fields.String(required=True, validate=validate.Length(min=1, max=MAX_URL))
    events = fields.List(
        fields.String(validate=validate.OneOf(EVENT_TYPES)),
        required=True,
        validate=validate.Length(min=1, max=len(EVENT_TYPES)),
    )
    description = fields.String(
        load_default="",
        validate=[
            validate.Length(max=MAX_DESCRIPTION),
            validate.Regexp(r"^[^\x00-\x1f\x7f]*$"),
        ],
    )


WEBHOOK_REQUEST = WebhookRequestSchema()


def manager() -> Principal:
    """The account whose webhooks these are: a personal token with the scope ``account``."""
    return runtime().accounts.authenticate(bearer_token(), "account")


def webhook_json(row: WebhookRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "url": row.url,
        "events": list(row.events),
        "description": row.description,
        "created_at": row.created_at,
    }


def attempt_json(row: AttemptRow) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "at": row.at,
        "status_code": row.status_code,
        "error": row.error,
        "duration_ms": row.duration_ms,
        "address": row.address,
    }


@webhooks_api.post("/v1/account/webhooks")
@creates_signed_in
def create_webhook() -> Response:
    principal = manager()
    data = load(WEBHOOK_REQUEST, json_body())
    # (a WebhookLookupsBusy is 503 with Retry-After: the server is busy, the URL may be good)
    # The token is judged again once the row is stored (``confirm``): an account closed, or
    # this token revoked, during the lookup is 401, as a request sent after it, and the row
    # is deleted (Webhooks.create says why no interleaving leaves one).
    created = runtime().webhooks.create(
        principal.handle, data["url"], data["events"], data["description"], confirm=manager
    )
    body = webhook_json(created.webhook) | {"secret": created.secret}
    headers = {"Location": f"/v1/account/webhooks/{created.webhook.id}", **NO_STORE}
    return json_response(body, 201, headers)


@webhooks_api.get("/v1/account/webhooks")
def list_webhooks() -> Response:
    principal = manager()
    rows = runtime().webhooks.of_account(principal.handle)
    return json_response({"webhooks": [webhook_json(row) for row in rows]}, headers=NO_STORE)


@webhooks_api.get("/v1/account/webhooks/<webhook_id>")
def get_webhook(webhook_id: str) -> Response:
    principal = manager()
    row = runtime().webhooks.get(principal.handle, webhook_id)
    return json_response(webhook_json(row), headers=NO_STORE)


@webhooks_api.delete("/v1/account/webhooks/<webhook_id>")
def delete_webhook(webhook_id: str) -> Response:
    principal = manager()
    runtime().webhooks.delete(principal.handle, webhook_id)
    return Response(status=204)


@webhooks_api.get("/v1/account/webhooks/<webhook_id>/deliveries")
def webhook_deliveries(webhook_id: str) -> Response:
    principal = manager()
    limit = int_arg("limit", 50, 1, 100)
    found = runtime().webhooks.deliveries(principal.handle, webhook_id, limit)
    deliveries = [
        {
            "id": str(row["id"]),
            "event": {"id": int(row["seq"]), "type": str(row["type"])},
            "status": str(row["status"]),
            "attempts": [attempt_json(attempt) for attempt in attempts],
            "created_at": _at(int(row["created_us"])),
            "next_attempt_at": _at(int(row["next_at"])) if row["status"] == "pending" else None,
        }
        for row, attempts in found
    ]
    return json_response({"deliveries": deliveries}, headers=NO_STORE)


def _at(us: int) -> str:
    return format_at(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us))
