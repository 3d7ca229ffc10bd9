"""Notify: each account's notices, and the webhooks that carry them out, with their delivery."""
