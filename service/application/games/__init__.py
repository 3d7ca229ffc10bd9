"""Games: create, act, read and history; their secrets, seeds and idempotency; the lobby, the
clocks and the scheduler; the audit, the receipts and the lists of games."""
