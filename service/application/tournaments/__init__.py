"""Tournaments (issue #45, contract 1.3): Swiss and arena, each an aggregate in the event store
(domain/tournament.py), their tables ordinary games, their listing, standings and schedule a
view (views.py), the use cases and the scheduler's chore in use_cases.py."""
