"""A typed client of the Can't Stop game service: play, follow, verify.

    from cantstop_client import Client
    client = Client("http://127.0.0.1:8000")
    client.sign_up("ann", "correct horse battery")
    created = client.create_game([{"account": "ann"}, {"name": "expert", "bot": "expert"}])

See README.md beside this package for a five-minute tour.
"""

from cantstop_client.client import Client, __version__
from cantstop_client.errors import ApiError, CantStopError, TransportError
from cantstop_client.notices import Notice
from cantstop_client.sse import EventStream, Parser, ServerSentEvent
from cantstop_client.types import (
    Accepted,
    ActionResult,
    Advice,
    Challenge,
    ChallengeLists,
    Check,
    Created,
    Event,
    GameState,
    Joined,
    Keys,
    LegalAction,
    Receipt,
    Seek,
    SignedUp,
    Verdict,
)
from cantstop_client.verify import (
    Export,
    MalformedExport,
    parse_export,
    parse_exports,
    verify_export,
    verify_receipt,
)

__all__ = [
    "Accepted",
    "ActionResult",
    "Advice",
    "ApiError",
    "CantStopError",
    "Challenge",
    "ChallengeLists",
    "Check",
    "Client",
    "Created",
    "Event",
    "EventStream",
    "Export",
    "GameState",
    "Joined",
    "Keys",
    "LegalAction",
    "MalformedExport",
    "Notice",
    "Parser",
    "Receipt",
    "Seek",
    "ServerSentEvent",
    "SignedUp",
    "TransportError",
    "Verdict",
    "__version__",
    "parse_export",
    "parse_exports",
    "verify_export",
    "verify_receipt",
]
