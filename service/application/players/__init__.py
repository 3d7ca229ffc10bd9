"""Players: accounts and their tokens, ratings and standings."""
