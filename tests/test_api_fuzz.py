"""Schema-driven fuzzing (schemathesis): whatever a client sends, the API answers as documented.

Every documented operation gets generated requests, valid and invalid. Each answer must not be a
500, must have a documented status, content type, headers and body, must refuse invalid data, and
must honour authentication. Two checks are left out on purpose: ``positive_data_acceptance``,
because the schema cannot express every rule of the game (players *or* seats, first_player only
with manual dice...), which the domain judges with a clear 422; and ``allow_header_conformance``,
because ``/v1/games/import`` shares its URL shape with ``/v1/games/{game_id}``.
"""

from __future__ import annotations

import json
import tempfile

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import allow_header_conformance, positive_data_acceptance

from service.app import create_app
from service.config import Settings

# Built at import: schemathesis parametrizes from the schema at collection time (its
# fixture-based loader does not work under pytest 9). The store is a throwaway SQLite file.
_STORE = tempfile.TemporaryDirectory(prefix="cantstop-fuzz-")
app = create_app(Settings(database_url=f"sqlite:///{_STORE.name}/fuzz.sqlite"), create_tables=True)
schema = schemathesis.openapi.from_wsgi("/openapi.yaml", app)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    """An export body: text as it is, anything else as one JSON line."""
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case: schemathesis.Case) -> None:
    case.call_and_validate(excluded_checks=[positive_data_acceptance, allow_header_conformance])
