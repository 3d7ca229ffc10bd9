"""The baseline of bench/http.py: a Flask hello-world answering a JSON POST with JSON, served by
the same gunicorn settings as the service (service/gunicorn_settings.py). Whatever the service
costs beyond this is its own work: the game, the store, the state."""

from __future__ import annotations

from flask import Flask, Response, jsonify, request

app = Flask("hello")


@app.post("/v1/games/<game_id>/actions")
def act(game_id: str) -> Response:
    body = request.get_json()
    return jsonify({"game": {"id": game_id, "status": "in_progress"}, "echo": body})
