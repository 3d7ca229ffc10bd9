"""Matchmaking: direct challenges and the seek pool, each ending in a game."""
