"""The main shapes of the service's answers, as typed dictionaries.

They are the JSON the server sends, unchanged (a ``TypedDict`` is a plain ``dict`` at run time):
nothing is copied or renamed, and a field the server adds later is still there, only not
typed. The fields marked ``NotRequired`` are ones older servers or some answers leave out. The
full schemas are in the service's ``openapi.yaml``; the fixed core in ``docs/api-contract.md``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Phase = Literal["roll", "move", "roll_or_stop"]
GameStatus = Literal["waiting", "in_progress", "finished"]


class Rules(TypedDict, total=False):
    columns_to_win: int
    jumping: bool
    forced_move: bool
    steep_hill: bool
    solitaire: Literal["easy", "advanced"] | None
    dice_faces: int


class LegalAction(TypedDict):
    """``{"type": "roll"}``, ``{"type": "stop"}`` or ``{"type": "move", "sums": [6, 8]}``: also
    the body to send back to act."""

    type: Literal["roll", "move", "stop"]
    sums: NotRequired[list[int]]


class Column(TypedDict):
    column: int
    height: int
    claimed_by: int | None


class PlayerState(TypedDict):
    seat: int
    name: str | None
    markers: dict[str, int]  # column (decimal text) -> space of the marker
    claimed: list[int]
    resigned: bool
    bot: NotRequired[str | None]
    account: NotRequired[str | None]
    timeouts_in_a_row: NotRequired[int]


class Turn(TypedDict):
    number: int
    player: int
    phase: Phase
    dice: list[int] | None
    runners: dict[str, int]  # column (decimal text) -> space of the runner
    deadline: NotRequired[str | None]


class Fairness(TypedDict):
    seed_commitment: str | None
    client_seed: str | None
    server_seed: str | None


class GameState(TypedDict):
    """A game at one version, with what the player to act may do (``legal_actions``)."""

    id: str
    version: int
    status: GameStatus
    rules: Rules
    dice: Literal["server", "manual"]
    columns: list[Column]
    players: list[PlayerState]
    turn: Turn | None
    legal_actions: list[LegalAction]
    winner: int | None
    solitaire: dict[str, Any] | None
    fairness: Fairness
    finish_reason: NotRequired[str | None]
    first_player: NotRequired[int | None]
    clock: NotRequired[dict[str, int] | None]
    rematch_of: NotRequired[str | None]
    rated: NotRequired[bool]


class Event(TypedDict):
    """One recorded event, as ``/events``, the export and the game stream serve it."""

    version: int
    type: str
    at: str
    data: dict[str, Any]
    prev_hash: str
    hash: str


class SeatToken(TypedDict):
    seat: int
    name: str | None
    token: str | None  # shown once; None for a computer player
    bot: NotRequired[str | None]


class Created(TypedDict):
    game: GameState
    seats: list[SeatToken]


class Joined(TypedDict):
    seat: int
    name: str
    token: str | None
    game: GameState
    bot: NotRequired[str | None]


class Receipt(TypedDict):
    """The server's Ed25519 signature of a game's latest event (contract 1.2): keep it."""

    game_id: str
    version: int
    hash: str
    at: str
    key_id: str
    signature: str


class ActionResult(TypedDict):
    game: GameState
    events: list[Event]
    receipt: Receipt


class PublicKey(TypedDict):
    key_id: str
    alg: Literal["Ed25519"]
    public_key: str  # base64url of the 32 raw bytes
    not_before: str
    not_after: str | None


class Keys(TypedDict):
    """The answer of ``GET /v1/keys``: save it beside your receipts."""

    keys: list[PublicKey]


class AdvisedMove(TypedDict):
    sums: list[int]
    bust_chance_after: float


class Advice(TypedDict):
    version: int
    seat: int
    phase: Phase
    bust_chance: float | None
    moves: list[AdvisedMove]
    recommended: dict[str, Any]
    strategy: str
    strategy_version: str


class Account(TypedDict):
    handle: str
    bot: bool
    builtin: NotRequired[bool]  # the server's own computer player, not a registered account
    created_at: str
    closed: NotRequired[bool]
    ratings: NotRequired[list[dict[str, Any]]]
    scopes: NotRequired[list[str]]


class SignedUp(TypedDict):
    account: Account
    token: str
    token_id: NotRequired[str]


class IssuedToken(TypedDict):
    id: str
    token: str
    scopes: list[str]
    created_at: str


class GameSummary(TypedDict):
    game_id: str
    seat: int
    status: GameStatus
    rated: bool
    created_at: str


class AccountGamesPage(TypedDict):
    games: list[GameSummary]
    next_cursor: str | None


# The functional form, because "from" (the challenger's handle) is a Python keyword.
Challenge = TypedDict(
    "Challenge",
    {
        "id": str,
        "status": Literal["pending", "accepted", "declined", "canceled", "expired"],
        "from": str,
        "to": str,
        "rules": Rules,
        "rated": bool,
        "clock": dict[str, int] | None,
        "created_at": str,
        "expires_at": str,
        "game_id": str | None,  # set once accepted
    },
)


class ChallengeLists(TypedDict):
    """The pending challenges, to you and from you."""

    incoming: list[Challenge]
    outgoing: list[Challenge]


class Accepted(TypedDict):
    challenge: Challenge
    game: GameState


class Seek(TypedDict):
    id: str
    status: Literal["open", "paired", "withdrawn", "expired"]
    account: str
    rules: Rules
    players: int
    rated: bool
    clock: dict[str, int] | None
    created_at: str
    expires_at: str
    game_id: str | None


class Check(TypedDict):
    """One check of a verdict: what, whether it holds, why, and the version to blame."""

    name: str
    ok: bool
    detail: str
    version: int | None


class Verdict(TypedDict):
    """The shape of the service's ``/audit`` verdict."""

    valid: bool
    checks: list[Check]
    first_bad_version: int | None
