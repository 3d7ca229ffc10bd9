"""marshmallow schemas for every request body and response of the HTTP API.

Requests are loaded strictly (unknown fields, wrong types → 422 invalid_request). Rule *values*
(ranges, combinations) and dice are judged by the domain, so that a transcript and an HTTP client
get the same answer with the same code.

The custom fields implement ``_deserialize``: marshmallow's public door for them despite the
underscore ("Custom Fields" in its docs: subclass ``Field`` and implement ``_serialize`` and/or
``_deserialize``; the method's docstring says concrete fields should implement it).
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from domain.audit import HEX64
from domain.game import MAX_NAME_LENGTH


class _StrictBoolean(fields.Boolean):
    """true or false only: no "yes", "on", 1 or 0 (1 == True in Python, so sets cannot tell)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


def StrictBool(**kw: Any) -> fields.Boolean:
    return _StrictBoolean(**kw)


def StrictInt(**kw: Any) -> fields.Integer:
    """An integer only: no "7" and no 7.0."""
    return fields.Integer(strict=True, **kw)


def Name(**kw: Any) -> fields.String:
    return fields.String(validate=validate.Length(min=1, max=MAX_NAME_LENGTH), **kw)


class ColumnsToWin(fields.Field):  # type: ignore[type-arg]
    """An integer, or the string "by_players"."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if value == "by_players" or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise ValidationError('an integer or "by_players"')


class RulesSchema(Schema):
    columns_to_win = ColumnsToWin(allow_none=True)
    jumping = StrictBool(allow_none=True)
    forced_move = StrictBool(allow_none=True)
    steep_hill = StrictBool(allow_none=True)
    solitaire = fields.String(allow_none=True, validate=validate.OneOf(["easy", "advanced"]))
    dice_faces = StrictInt(allow_none=True)


class PlayerField(fields.Field):  # type: ignore[type-arg]
    """A player at creation: a name, {"name": …, "bot": <computer player id>}, or
    {"account": <the caller's own handle>} (contract 1.2)."""

    NAME = validate.Length(min=1, max=MAX_NAME_LENGTH)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if isinstance(value, str):
            self.NAME(value)
            return value
        if isinstance(value, dict) and set(value) == {"account"}:
            if not isinstance(value["account"], str):
                raise ValidationError("an account is named by its handle")
            return dict(value)
        if isinstance(value, dict) and set(value) <= {"name", "bot"} and "name" in value:
            if not isinstance(value["name"], str):
                raise ValidationError("a player's name is a string")
            self.NAME(value["name"])
            if "bot" in value and not isinstance(value["bot"], str):
                raise ValidationError("a bot is named by its id, e.g. expert")
            return dict(value)
        raise ValidationError(
            'a name, {"name": "Robo", "bot": "expert"}, or {"account": "<your handle>"}'
        )


class ClockSchema(Schema):
    turn_seconds = StrictInt(required=True, validate=validate.Range(min=5, max=604_800))


# The seeds of contract 1.1, for a new game and for the claim that creates a rematch.
CLIENT_SEED = validate.Length(min=1, max=200)
SEED_COMMITMENT = validate.Regexp(rf"^{HEX64.pattern}$")  # sha256 hex, as the audit reads it


class CreateGameSchema(Schema):
    players = fields.List(PlayerField(), validate=validate.Length(min=1, max=8))
    seats = StrictInt(validate=validate.Range(min=2, max=8))
    rules = fields.Nested(RulesSchema, allow_none=True)
    dice = fields.String(load_default="server", validate=validate.OneOf(["server", "manual"]))
    first_player = StrictInt(allow_none=True)
    client_seed = fields.String(allow_none=True, validate=CLIENT_SEED)
    seed_commitment = fields.String(validate=SEED_COMMITMENT)
    clock = fields.Nested(ClockSchema, allow_none=True)
    rated = StrictBool()

    @validates_schema
    def _players_or_seats(self, data: dict[str, Any], **_: Any) -> None:
        if ("players" in data) == ("seats" in data):
            raise ValidationError("give either players (a list of names) or seats (2 to 8)")


class JoinSchema(Schema):
    name = Name()  # required but with a personal token (then the account's handle)
    bot = fields.String(validate=validate.Length(min=1, max=40))


class RematchSchema(Schema):
    """The claim that creates a rematch may bring the seeds of contract 1.1 (as a new game)."""

    client_seed = fields.String(validate=CLIENT_SEED)
    seed_commitment = fields.String(validate=SEED_COMMITMENT)


class ActionSchema(Schema):
    type = fields.String(required=True, validate=validate.OneOf(["roll", "move", "stop", "resign"]))
    # The dice are judged by the rules (invalid_dice), after the turn checks, as the contract says:
    # null too (not four integers), which in a server-dice game is the same as leaving it out.
    dice = fields.Raw(allow_none=True)
    entropy = fields.String(validate=validate.Regexp(r"^[\x21-\x7e]{1,64}$"))
    sums = fields.List(StrictInt(), validate=validate.Length(min=1, max=2))

    @validates_schema
    def _fields_fit_type(self, data: dict[str, Any], **_: Any) -> None:
        kind = data.get("type")
        if "dice" in data and kind != "roll":
            raise ValidationError("only a roll carries dice", "dice")
        if "entropy" in data and kind != "roll":
            raise ValidationError("only a roll carries entropy", "entropy")
        if kind == "move" and "sums" not in data:
            raise ValidationError("a move needs its sums, e.g. [6, 10]", "sums")
        if "sums" in data and kind != "move":
            raise ValidationError("only a move carries sums", "sums")


class TranscriptSchema(Schema):
    players = fields.List(Name(), required=True, validate=validate.Length(min=1, max=8))
    rules = fields.Nested(RulesSchema, allow_none=True)
    first_player = StrictInt(allow_none=True)
    actions = fields.List(fields.Dict(), load_default=list)
    trace = StrictBool(load_default=False)


# ------------------------------------------------------------------------------ responses
class ColumnSchema(Schema):
    column = fields.Integer()
    height = fields.Integer()
    claimed_by = fields.Integer(allow_none=True)


class PlayerSchema(Schema):
    seat = fields.Integer()
    name = fields.String(allow_none=True)
    markers = fields.Dict(keys=fields.String(), values=fields.Integer())
    claimed = fields.List(fields.Integer())
    resigned = fields.Boolean()


class TurnSchema(Schema):
    number = fields.Integer()
    player = fields.Integer()
    phase = fields.String()
    dice = fields.List(fields.Integer(), allow_none=True)
    runners = fields.Dict(keys=fields.String(), values=fields.Integer())


class LegalActionSchema(Schema):
    type = fields.String()
    sums = fields.List(fields.Integer())


class SolitaireSchema(Schema):
    mode = fields.String()
    turns = fields.Integer()
    target = fields.Integer()
    rating = fields.String(allow_none=True)


class FairnessSchema(Schema):
    seed_commitment = fields.String(allow_none=True)
    client_seed = fields.String(allow_none=True)
    server_seed = fields.String(allow_none=True)


class RulesOutSchema(Schema):
    columns_to_win = fields.Integer()
    jumping = fields.Boolean()
    forced_move = fields.Boolean()
    steep_hill = fields.Boolean()
    solitaire = fields.String(allow_none=True)
    dice_faces = fields.Integer()


class GameStateSchema(Schema):
    id = fields.String(allow_none=True)
    version = fields.Integer()
    status = fields.String()
    rules = fields.Nested(RulesOutSchema)
    dice = fields.String()
    columns = fields.List(fields.Nested(ColumnSchema))
    players = fields.List(fields.Nested(PlayerSchema))
    turn = fields.Nested(TurnSchema, allow_none=True)
    legal_actions = fields.List(fields.Nested(LegalActionSchema))
    winner = fields.Integer(allow_none=True)
    finish_reason = fields.String(allow_none=True)
    first_player = fields.Integer(allow_none=True)
    solitaire = fields.Nested(SolitaireSchema, allow_none=True)
    fairness = fields.Nested(FairnessSchema)


class EventSchema(Schema):
    version = fields.Integer()
    type = fields.String()
    at = fields.String()
    data = fields.Dict()
    prev_hash = fields.String()
    hash = fields.String()


class SeatTokenSchema(Schema):
    seat = fields.Integer()
    name = fields.String(allow_none=True)
    token = fields.String()


class CreatedSchema(Schema):
    game = fields.Nested(GameStateSchema)
    seats = fields.List(fields.Nested(SeatTokenSchema))


class ActionResultSchema(Schema):
    game = fields.Nested(GameStateSchema)
    events = fields.List(fields.Nested(EventSchema))


class EventPageSchema(Schema):
    events = fields.List(fields.Nested(EventSchema))
    next_after = fields.Integer(allow_none=True)


class GameSummarySchema(Schema):
    id = fields.String()
    status = fields.String()
    created_at = fields.String()
    players = fields.List(fields.String(allow_none=True))
    open_seats = fields.Integer()
    dice = fields.String()
    rules = fields.Nested(RulesOutSchema)
    winner = fields.Integer(allow_none=True)


class CommitmentSchema(Schema):
    seed_commitment = fields.String()
    expires_at = fields.String()


class GameListSchema(Schema):
    games = fields.List(fields.Nested(GameSummarySchema))
    total = fields.Integer()
    next_offset = fields.Integer(allow_none=True)


class VerdictErrorSchema(Schema):
    index = fields.Integer()
    code = fields.String()
    detail = fields.String()


class VerdictSchema(Schema):
    valid = fields.Boolean()
    applied = fields.Integer()
    error = fields.Nested(VerdictErrorSchema, allow_none=True)
    game = fields.Nested(GameStateSchema)
    trace = fields.List(fields.Nested(GameStateSchema))


# ------------------------------------------------------------------------------ accounts
class SignUpSchema(Schema):
    handle = fields.String(required=True, validate=validate.Length(min=1, max=40))
    password = fields.String(validate=validate.Length(max=4096))
    bot = StrictBool(load_default=False)


class SignInSchema(Schema):
    handle = fields.String(required=True, validate=validate.Length(min=1, max=40))
    password = fields.String(required=True, validate=validate.Length(max=4096))
    scopes = fields.List(fields.String(), load_default=["play"])
    description = fields.String(
        load_default="",
        validate=[validate.Length(max=200), validate.Regexp(r"^[^\x00-\x1f\x7f]*$")],
    )


# ----------------------------------------------------------------- challenges and seeks
class ChallengeRequestSchema(Schema):
    to = fields.String(required=True, validate=validate.Length(min=1, max=40))
    rules = fields.Nested(RulesSchema, allow_none=True)
    rated = StrictBool(load_default=False)
    clock = fields.Nested(ClockSchema, allow_none=True)


class SeekRequestSchema(Schema):
    rules = fields.Nested(RulesSchema, allow_none=True)
    players = StrictInt(load_default=2, validate=validate.Range(min=2, max=8))
    rated = StrictBool(load_default=False)
    clock = fields.Nested(ClockSchema, allow_none=True)


# --------------------------------------------------------------------------- tournaments
class TournamentRequestSchema(Schema):
    """``POST /v1/tournaments``: the shape; the bounds and combinations are judged by the
    application (service/application/tournaments/use_cases.py), with one code for all."""

    name = fields.String(required=True, validate=validate.Length(min=1, max=80))
    kind = fields.String(required=True, validate=validate.OneOf(["swiss", "arena"]))
    rules = fields.Nested(RulesSchema, allow_none=True)
    players_per_table = StrictInt(required=True, validate=validate.Range(min=2, max=8))
    rounds = StrictInt(allow_none=True, validate=validate.Range(min=1, max=20))
    minutes = StrictInt(allow_none=True, validate=validate.Range(min=1, max=1440))
    clock = fields.Nested(ClockSchema, required=True)
    rated = StrictBool(load_default=False)
    starts_at = fields.String(allow_none=True, validate=validate.Length(min=1, max=40))
