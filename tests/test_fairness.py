"""The provably-fair dice derivation against fixed vectors (docs/auditing.md's worked example)."""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter

import pytest

from domain.fairness import commitment, draw

SEED = "b437ec21435542ac96f0abd824bcd1a8a0fb8a2ced6e3ec6f098b97d20367e6c"


def test_commitment_is_sha256_of_the_seed_text() -> None:
    assert commitment(SEED) == "3c023620171ddf44c90d0dce3bbb253bad74da41a7136e51de0f1ad6d0449c90"


def test_worked_example_of_the_auditing_guide() -> None:
    # HMAC bytes 0x58 0x93 0x27 0xfe 0x66 …: 254 is skipped (≥ 252 for six faces).
    assert draw(SEED, "example-game", 6, 4, 6) == [5, 4, 4, 1]


def test_bytes_above_the_fair_limit_are_skipped() -> None:
    digest = hmac.new(SEED.encode(), b"example-game:6:0", hashlib.sha256).digest()
    usable = [b % 6 + 1 for b in digest if b < 252]
    assert draw(SEED, "example-game", 6, len(usable), 6) == usable


def test_long_draws_continue_into_the_next_rounds() -> None:
    first = hmac.new(SEED.encode(), b"c:0:0", hashlib.sha256).digest()
    second = hmac.new(SEED.encode(), b"c:0:1", hashlib.sha256).digest()
    expected = [b % 8 + 1 for b in first + second]  # 256 % 8 == 0: no byte is skipped
    assert draw(SEED, "c", 0, 64, 8) == expected


@pytest.mark.parametrize("faces", [6, 8])
def test_every_face_is_about_equally_likely(faces: int) -> None:
    counts = Counter(d for nonce in range(3000) for d in draw(SEED, "uniform", nonce, 4, faces))
    expected = 12000 / faces
    chi_square = sum((counts[f] - expected) ** 2 / expected for f in range(1, faces + 1))
    assert set(counts) == set(range(1, faces + 1))
    assert chi_square < 25  # far beyond the 0.1% tail for 5 or 7 degrees of freedom
