"""``POST /v1/transcripts/verify``: judge a game played anywhere (contract: Transcripts)."""

from __future__ import annotations

from flask import Blueprint, Response

from domain.transcript import MalformedTranscript, verify
from service.http import schemas
from service.http.core import BadRequest, json_body, json_response, load

transcripts_api = Blueprint("transcripts", __name__)

TRANSCRIPT = schemas.TranscriptSchema()


@transcripts_api.post("/v1/transcripts/verify")
def verify_transcript() -> Response:
    doc = json_body()
    loaded = load(TRANSCRIPT, doc)
    try:
        verdict = verify(
            {k: v for k, v in doc.items() if k != "trace"}, trace=bool(loaded["trace"])
        )
    except MalformedTranscript as exc:
        raise BadRequest(str(exc)) from None
    return json_response(verdict)
