"""Computer players: strategies that choose an action for a ``Position``, and their registry.

``get(id)`` finds one (``UnknownStrategy``, a KeyError, for an id nobody has), ``list()`` gives
them all, in the order the API lists them.
"""

from __future__ import annotations

from domain.strategies.base import Action, Strategy, UnknownStrategy
from domain.strategies.expert import ExpertStrategy
from domain.strategies.random_play import RandomStrategy
from domain.strategies.rule_of_28 import RuleOf28

__all__ = ["STRATEGIES", "Action", "Strategy", "UnknownStrategy", "get", "list"]

STRATEGIES: dict[str, Strategy] = {
    s.id: s for s in (RandomStrategy(), RuleOf28(), ExpertStrategy())
}


def get(strategy_id: str) -> Strategy:
    """The strategy with this id; UnknownStrategy otherwise."""
    try:
        return STRATEGIES[strategy_id]
    except KeyError:
        raise UnknownStrategy(strategy_id) from None


def list() -> tuple[Strategy, ...]:
    """Every strategy, in registry order."""
    return tuple(STRATEGIES.values())
