"""``POST /v1/transcripts/verify``: judge a game played anywhere (contract: Transcripts)."""

from __future__ import annotations

from collections.abc import Iterator

from flask import Blueprint, Response

from domain.transcript import MalformedTranscript, Verification, verify
from service.http import schemas
from service.http.core import BadRequest, audit_charge, dumps, json_body, json_response, load

transcripts_api = Blueprint("transcripts", __name__)

TRANSCRIPT = schemas.TranscriptSchema()
CHUNK = 64 * 1024
"""Bytes of a streamed trace gathered before each write."""


@transcripts_api.post("/v1/transcripts/verify")
def verify_transcript() -> Response:
    doc = json_body()
    loaded = load(TRANSCRIPT, doc)
    transcript = {k: v for k, v in doc.items() if k != "trace"}
    # Charged by its length before the replay, as an import is: one count of the ``audit``
    # limit per 1,000 actions begun (256 KiB holds ~8,000 of them, ~16,000 events of busts).
    audit_charge()(1 + len(loaded.get("actions") or []))
    try:
        if not loaded["trace"]:
            return json_response(verify(transcript))
        verification = Verification(transcript)  # a malformed one is a 422 before any byte
    except MalformedTranscript as exc:
        raise BadRequest(str(exc)) from None
    return Response(traced(verification), mimetype="application/json")


def traced(verification: Verification) -> Iterator[bytes]:
    """The verdict with its trace, written as the replay goes: the trace first, each state
    encoded as it is made, then the verdict's fields. A trace is ~1.2 KB a state, 40 times the
    ~30 bytes of the action it follows, so one held whole was the largest thing a request could
    make a worker hold: a 217 KB transcript of 7,067 actions peaked at 28 MB (tracemalloc),
    where now a worker holds a chunk (tests/test_transcripts.py
    ``test_a_long_trace_is_streamed_without_being_held_whole``). The fields' order is not the
    verdict's usual one; JSON's objects have none."""
    chunk = bytearray(b'{"trace":[')
    first = True
    for state in verification.states():
        if not first:
            chunk += b","
        first = False
        chunk += dumps(state)
        if len(chunk) >= CHUNK:
            yield bytes(chunk)
            chunk.clear()
    verdict = dumps(verification.verdict())
    chunk += b"]," + verdict[1:]  # the verdict's fields after the trace, in one object
    yield bytes(chunk)
