"""A password hasher for the test process's own users: PBKDF2-SHA256 at one iteration.

Django's default (1,000,000 iterations) takes about half a second a password on CI's
machine, and the tests make and check passwords by the hundred (every `staff` user,
every login, every refused login of the throttle's tests). The hashes keep Django's
format, `pbkdf2_sha256$<iterations>$<salt>$<hash>`, so a server that a test starts
with the real settings checks them as it checks any other.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
