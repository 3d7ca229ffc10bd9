"""Who a client is, to the rate limits and per-client caps: its address as it is, but an IPv6
address by its /64 network (``service.http.core.client_of``). A /64 is what one subscriber is
handed, and its 2^64 addresses cost nothing to rotate through: counted per address, one host
could sign in (argon2's 64 MiB a guess), sign up or open streams without ever reaching a count.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from service.config import Settings
from service.http.app import create_app
from service.http.core import client_of

SIGN_INS_A_MINUTE = 10  # service.config's default


@pytest.mark.parametrize(
    ("remote", "counted"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::1%eth0", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),  # an IPv4 client of a dual-stack socket
        ("::1", "::/64"),
        ("not an address", "not an address"),
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_an_ipv6_client_is_counted_by_its_64_network(remote: str | None, counted: str) -> None:
    assert client_of(remote) == counted


def at(address: str) -> dict[str, Any]:
    return {"environ_base": {"REMOTE_ADDR": address}}


def test_sign_ins_rotating_through_one_64_reach_the_count(database_url: str) -> None:
    app: Flask = create_app(Settings(database_url=database_url), create_tables=True)
    client = app.test_client()
    body = {"handle": "nobody", "password": "not the password"}
    answers = [
        client.post("/v1/tokens", json=body, **at(f"2001:db8:7:7::{n:x}")).status_code
        for n in range(1, SIGN_INS_A_MINUTE + 2)
    ]
    assert answers == [401] * SIGN_INS_A_MINUTE + [429]
    # another subscriber's network is counted apart (another handle: guesses at "nobody" from
    # addresses not known for it are capped per handle as well)
    other = {"handle": "somebody", "password": "not the password"}
    assert client.post("/v1/tokens", json=other, **at("2001:db8:7:8::1")).status_code == 401
