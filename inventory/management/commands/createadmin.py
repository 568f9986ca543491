"""`manage.py createadmin`: make sure an admin can log in, without prompts.

Idempotent: creates or updates the superuser named by MAC_ADMIN_USER (default
"admin"). With MAC_ADMIN_PASSWORD the password is set to it when it differs from
the stored one; without, a new user gets a generated password printed once, and an
existing one keeps its own.

`mac start master` runs this on every start. Setting the same password again would
store a new salted hash, and Django ends every session whose hash no longer matches:
each restart would log out every admin. So an unchanged password is left alone.
"""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create or update the MAC superuser from MAC_ADMIN_USER / MAC_ADMIN_PASSWORD."
    # A step of `mac start master`, after its migrate ran Django's system checks.
    requires_system_checks: list[str] = []

    def handle(self, *args, **options) -> None:
        username = os.environ.get("MAC_ADMIN_USER", "").strip() or "admin"
        password = os.environ.get("MAC_ADMIN_PASSWORD", "")
        if password and len(password) < 8:
            raise CommandError(
                "MAC_ADMIN_PASSWORD is shorter than 8 characters; choose a longer one and rerun."
            )
        users = get_user_model()
        user, created = users.objects.get_or_create(
            **{users.USERNAME_FIELD: username}, defaults={"is_staff": True, "is_superuser": True}
        )
        generated = None
        changed = bool(password) and (created or not user.check_password(password))
        if changed:
            user.set_password(password)
        elif created:
            generated = secrets.token_urlsafe(12)
            user.set_password(generated)
        user.is_staff = user.is_superuser = user.is_active = True
        user.save()
        if generated:
            self.stdout.write(
                f"Created admin user {username!r} with password: {generated}\n"
                "It is shown only now; change it at /admin/password_change/ "
                "or set MAC_ADMIN_PASSWORD and rerun `manage.py createadmin`."
            )
        elif changed:
            state = "Created" if created else "Updated"
            self.stdout.write(f"{state} admin user {username!r}; password from MAC_ADMIN_PASSWORD.")
        elif password:
            self.stdout.write(
                f"Admin user {username!r} exists; its password already is MAC_ADMIN_PASSWORD."
            )
        else:
            self.stdout.write(f"Admin user {username!r} exists; password unchanged.")
