"""A client generated from openapi.yaml, as a new integrator would generate it
(openapi-python-client, a dev dependency), imports and plays a whole game against a real
server through its typed calls and models: a game against the built-in bot ``random``, with a
committed seed, each action on the version it saw (If-Match) under an Idempotency-Key, to the
end; then the typed history, the export, the board picture, the record sheet (text and PDF)
and the document itself.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.http import HOST
from tests.support.servers import free_port, serving

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "cantstop_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The client generated into a temporary directory, imported (every module of it)."""
    where = tmp_path_factory.mktemp("generated")
    config = where / "config.json"
    # The import's NDJSON body is sent as a file (the generator knows JSON and octet-stream),
    # with its own content type: the override openapi.yaml names for it. The generator (0.29.1)
    # then annotates the two-bodied call with `Unset` without importing it (upstream issue
    # openapi-python-client#1451, fix proposed in #1478): the one post hook adds the import.
    fix = "from ...types import Response, UNSET"
    config.write_text(
        json.dumps(
            {
                "post_hooks": [
                    f"sed -i 's/^{fix}$/{fix}, Unset/' api/audit/import_game.py",
                ],
                "package_name_override": PACKAGE,
                "content_type_overrides": {"application/x-ndjson": "application/octet-stream"},
            }
        )
    )
    started = time.monotonic()
    output = ["--output-path", str(where / PACKAGE), "--meta", "none", "--config", str(config)]
    result = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(ROOT / "openapi.yaml"), *output],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # What the generator cannot read, it leaves out with a warning: nothing is left out.
    said = result.stdout + result.stderr
    warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
    assert warnings == [], said
    print(f"generated in {time.monotonic() - started:.1f} s")
    sys.path.insert(0, str(where))
    try:
        package = importlib.import_module(PACKAGE)
        for module in sorted((where / PACKAGE).rglob("*.py")):
            name = ".".join(module.relative_to(where).with_suffix("").parts)
            importlib.import_module(name.removesuffix(".__init__"))
        yield package
    finally:
        sys.path.remove(str(where))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_the_generated_client_plays_a_whole_game_against_a_real_server(
    generated: ModuleType, tmp_path: Path
) -> None:
    m = module("models")
    api = "api.{}".format
    commit_seed, create_game, get_game, act = (
        module(api(name))
        for name in ("games.commit_seed", "games.create_game", "games.get_game", "games.act")
    )
    port = free_port()
    env = {"CANTSTOP_BOT_PAUSE": "0"}
    with (
        serving(tmp_path, "--port", str(port), "--workers", "1", env=env, ready_port=port),
        contextlib.ExitStack() as stack,  # the generated clients, closed
    ):
        base = f"http://{HOST}:{port}"
        client = generated.Client(base_url=base, raise_on_unexpected_status=True)
        stack.enter_context(client)
        commitment = commit_seed.sync(client=client)
        assert isinstance(commitment, m.SeedCommitment)
        body = m.CreateGameWithPlayers(
            players=["Ann", m.Player(name="Robo", bot=m.BotId.RANDOM)],
            seed_commitment=commitment.seed_commitment,
            client_seed="ann-picked-this",
        )
        created = create_game.sync(client=client, body=body)
        assert isinstance(created, m.Created), created
        game_id = uuid.UUID(created.game.id)
        token = created.seats[0].token
        assert isinstance(token, str) and created.seats[1].token is None
        ann = generated.AuthenticatedClient(
            base_url=base, token=token, raise_on_unexpected_status=True
        )
        stack.enter_context(ann)

        state = created.game
        moves_this_turn, actions, deadline = 0, 0, time.monotonic() + 60
        while state.status != m.GameStateStatus.FINISHED:
            assert time.monotonic() < deadline, "the game did not finish in 60 s"
            if state.turn is None or state.turn.player != 0:  # the bot's turn: it plays alone
                time.sleep(0.01)
                state = get_game.sync(game_id, client=client)
                continue
            kinds = {a.type_ for a in state.legal_actions}
            if m.LegalActionType.MOVE in kinds:  # the first legal move
                move = next(a for a in state.legal_actions if a.type_ == m.LegalActionType.MOVE)
                action: Any = m.MoveAction(type_="move", sums=move.sums)
                moves_this_turn += 1
            elif m.LegalActionType.STOP in kinds and moves_this_turn >= 3:
                action = m.StopOrResignAction(type_=m.StopOrResignActionType.STOP)
                moves_this_turn = 0
            else:
                action = m.ServerRollAction(type_="roll", entropy=f"ann-{actions}")
            result = act.sync(
                game_id,
                client=ann,
                body=action,
                if_match=f'"{state.version}"',
                idempotency_key=f"ann-{actions}",
            )
            assert isinstance(result, m.ActionResult), result
            assert result.receipt.version == result.game.version
            if result.game.turn is None or result.game.turn.player != 0:
                moves_this_turn = 0  # a bust or a stop passed the turn
            state, actions = result.game, actions + 1
        assert state.winner in (0, 1) and state.fairness.server_seed is not None

        # The history, typed: one class per event type, each with its own data.
        page = module(api("history.list_events")).sync(game_id, client=client, limit=1000)
        assert isinstance(page, m.EventPage) and page.next_after is None
        events = page.events
        assert [e.version for e in events] == list(range(1, state.version + 1))
        assert isinstance(events[0], m.GameCreatedEvent) and events[0].data.seats == 2
        assert isinstance(events[-1], m.SeedRevealedEvent)
        rolls = [e for e in events if isinstance(e, m.DiceRolledEvent)]
        assert rolls and all(len(e.data.dice) == 4 for e in rolls)
        assert {e.data.entropy for e in rolls if e.data.seat == 0} <= {
            f"ann-{n}" for n in range(actions)
        }
        assert any(isinstance(e, m.GameFinishedEvent) for e in events)

        # Downloads: bytes, as generated clients read application/octet-stream.
        export = module(api("audit.export_game")).sync(game_id, client=client)
        lines = export.payload.read().decode("utf-8").splitlines()
        assert json.loads(lines[0])["format"] == "cantstop-game"
        assert [json.loads(line)["hash"] for line in lines[1:]] == [e.hash_ for e in events]
        # The export imported again, as the NDJSON body it is, through the generated call.
        imported = module(api("audit.import_game")).sync(
            client=client,
            body=generated.types.File(payload=io.BytesIO("\n".join(lines).encode() + b"\n")),
        )
        assert isinstance(imported, m.Imported), imported
        assert imported.game.id != str(game_id) and imported.game.version == state.version
        board = module(api("audit.board_picture")).sync(game_id, client=client)
        assert board.payload.read().startswith(b"<?xml")
        sheet = module(api("solitaire.get_record_sheet"))
        text = sheet.sync(game_id, client=client, seat=0)
        assert isinstance(text, str) and text.startswith("Can't Stop")
        printer = generated.Client(base_url=base, headers={"Accept": "application/pdf"})
        stack.enter_context(printer)
        pdf = sheet.sync_detailed(game_id, client=printer, seat=0)
        assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
        document = module(api("service.openapi")).sync(client=client)
        assert document.payload.read() == (ROOT / "openapi.yaml").read_bytes()
