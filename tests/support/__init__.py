"""What the test modules share: servers, HTTP helpers, game builders, polling, stored rows.

Test modules import these from ``tests.support.*``, never from one another
(tests/test_architecture.py fails otherwise).
"""
