"""What admins, the API, commands and beat do with channels: apply, test, seed from env.

`apply_channels()` is the one way alertmanager.yml changes: it writes the templates and
the configuration built from the channels (alerting.amconfig), records on each channel
whether it is in or left out and why, and asks Alertmanager to reload when the file
changed. A reload that fails (Alertmanager down) is remembered and retried by the next
poll (alerting.tasks); a restarted Alertmanager reads the file anyway.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from alerting import amconfig, bulkheads, destinations
from alerting.amconfig import TEST_LABEL
from alerting.choices import ChannelKind
from alerting.client import Alertmanager, AlertmanagerUnavailable
from alerting.models import NotificationChannel, channel_errors
from alerting.secrets import scrub

log = logging.getLogger(__name__)

RELOAD_PENDING_KEY = "alerting:reload-pending"
ENV_ACTOR = "env"
WEBHOOK_FROM_ENV = "webhook (MAC_ALERT_WEBHOOK_URL)"
EMAIL_FROM_ENV = "email (MAC_ALERT_EMAIL_TO)"
TEST_ALERT_MINUTES = 5


class ChannelError(Exception):
    """A channel that cannot do what was asked; str() says what to do."""


@dataclass
class Applied:
    """What apply_channels() did."""

    managed: bool = True
    written: bool = False  # alertmanager.yml or mac.tmpl changed
    reloaded: bool = False
    reload_error: str = ""
    config_error: str = ""  # the whole configuration was refused: the old file stays
    write_error: str = ""  # the files could not be written (a full disk): the old ones stay
    included: list[int] = field(default_factory=list)
    left_out: dict[int, str] = field(default_factory=dict)
    # Held back for now: the name resolves inside the master, or not at all (pending).
    held: dict[int, str] = field(default_factory=dict)


def config_path() -> Path:
    return Path(settings.ALERTMANAGER_DIR) / amconfig.CONFIG_FILE


def apply_channels(*, reload: bool = True, client: Alertmanager | None = None) -> Applied:
    """Write alertmanager.yml (and mac.tmpl) from the channels; reload Alertmanager if changed."""
    if not settings.ALERTMANAGER_MANAGED:
        return Applied(managed=False)
    directory = Path(settings.ALERTMANAGER_DIR)
    result = Applied()
    try:
        # First: amtool's check of the whole configuration reads the templates.
        templates_changed = amconfig.write_file(
            directory / amconfig.TEMPLATE_FILE, amconfig.template_text().encode(), 0o644
        )
    except OSError as exc:
        return _not_written(result, exc)
    channels = list(NotificationChannel.objects.order_by("pk"))
    built = amconfig.build(channels, directory, amconfig.Timing.from_settings())
    result.included, result.left_out, result.held = built.included, built.errors, built.held
    _record_checks(channels, built.errors)
    _record_held(built.held)
    whole = scrub(amconfig.check_config(built.text, amconfig.amtool_path()), channels)
    if whole:
        # Each channel passed alone, so this is MAC's bug or amtool's; keep what runs.
        log.error("alertmanager.yml not written, Alertmanager would refuse it: %s", whole)
        result.config_error = whole
        return result
    try:
        config_changed = amconfig.write_file(config_path(), built.text.encode(), 0o600)
    except OSError as exc:
        return _not_written(result, exc)
    # Written: nothing is pending any more but what is held back.
    NotificationChannel.objects.exclude(pending_reason="").exclude(pk__in=built.held).update(
        pending_reason=""
    )
    result.written = templates_changed or config_changed
    if result.written:
        cache.set(RELOAD_PENDING_KEY, True, None)
    if reload and (result.written or cache.get(RELOAD_PENDING_KEY)):
        try:
            with bulkheads.ALERTMANAGER.slot():
                (client or Alertmanager.from_settings()).reload()
        except (AlertmanagerUnavailable, bulkheads.BulkheadFull) as exc:
            # Alertmanager's own complaint about the file may quote a channel's URL.
            result.reload_error = scrub(str(exc), channels)
            log.warning(
                "Alertmanager not reloaded (the next poll retries): %s", result.reload_error
            )
        else:
            cache.delete(RELOAD_PENDING_KEY)
            result.reloaded = True
    return result


def _not_written(result: Applied, exc: OSError) -> Applied:
    # Atomic writes: Alertmanager keeps the files it has. The poll retries
    # (alerting.tasks) and /health says degraded until it succeeds.
    result.write_error = write_failure(exc)
    log.warning("alertmanager.yml not written (the next poll retries): %s", exc)
    return result


def write_failure(exc: OSError) -> str:
    """A failed write of Alertmanager's files, in words that name the disk."""
    where = exc.filename or settings.ALERTMANAGER_DIR
    why = exc.strerror or str(exc)
    return (
        f"alertmanager.yml could not be written: {why} ({where}, MAC_ALERTMANAGER_DIR); "
        "free space there, MAC retries on every poll"
    )


def config_out_of_step() -> str:
    """Why alertmanager.yml does not say what the database says ("" when it does).

    Cheap enough for /health and every poll: no lookup, no amtool (see file_out_of_step).
    """
    if not settings.ALERTMANAGER_MANAGED:
        return ""
    return pending_channel() or file_out_of_step()


def pending_channel() -> str:
    """The first channel saved but not in alertmanager.yml yet, and why ("" when none):
    the file could not be written, or its name resolves inside the master (held back).
    Each reason says what MAC does next."""
    pending = NotificationChannel.objects.exclude(pending_reason="").order_by("pk")
    first = pending.values_list("name", "pending_reason").first()
    return f"channel {first[0]!r} is saved but pending: {first[1]}" if first else ""


def file_out_of_step() -> str:
    """Why alertmanager.yml differs from the channels that passed their last check ("" when
    it does not): they are rendered again and compared with the file."""
    directory = Path(settings.ALERTMANAGER_DIR)
    good = NotificationChannel.objects.filter(enabled=True, config_error="", pending_reason="")
    timing = amconfig.Timing.from_settings()
    text = amconfig.dump(
        amconfig.render_config(good.order_by("pk"), directory / amconfig.TEMPLATE_FILE, timing)
    )
    try:
        if config_path().read_text() == text:
            return ""
    except FileNotFoundError:
        return f"{config_path()} does not exist yet"
    except OSError as exc:
        return f"{config_path()} cannot be read: {exc.strerror or exc}"
    return f"{config_path()} differs from the channels in the database"


def _record_held(held: dict[int, str]) -> None:
    for pk, why in held.items():
        NotificationChannel.objects.filter(pk=pk).exclude(pending_reason=why).update(
            pending_reason=why
        )
    if held:
        log.warning("channels held back (their names resolve inside the master): %s", held)


def destinations_moved() -> bool:
    """Whether a channel in use now resolves inside the master, or not at all (beat's
    poll then writes alertmanager.yml again without it: alerting.destinations)."""
    if not settings.ALERTMANAGER_MANAGED:
        return False
    in_use = NotificationChannel.objects.filter(enabled=True, config_error="", pending_reason="")
    return any(destinations.held_back(channel) for channel in in_use)


def _record_checks(channels: list[NotificationChannel], errors: dict[int, str]) -> None:
    now = timezone.now()
    for channel in channels:
        error = errors.get(channel.pk, "")
        if channel.config_error != error or channel.checked_at is None:
            NotificationChannel.objects.filter(pk=channel.pk).update(
                config_error=error, checked_at=now
            )
            channel.config_error = error


def save_channel(channel: NotificationChannel, *, actor: str) -> Applied:
    """Save an admin's or the API's channel, then rewrite the configuration and reload.

    Applied at once, so that the admin and the API can say whether the channel is in
    use; channel.config_error is set to what the check found.
    """
    if not channel.pk and not channel.created_by:
        channel.created_by = actor[:150]
    channel.save()
    applied = apply_channels()
    channel.config_error = applied.left_out.get(channel.pk, "")
    channel.pending_reason = applied.held.get(channel.pk, "")
    if applied.write_error:
        # Saved, and said so: the poll writes it once it can (config_out_of_step).
        NotificationChannel.objects.filter(pk=channel.pk).update(pending_reason=applied.write_error)
        channel.pending_reason = applied.write_error
    return applied


def delete_channels(channels: list[NotificationChannel]) -> Applied:
    with transaction.atomic():
        for channel in channels:
            channel.delete()
    return apply_channels()


def describe_applied(applied: Applied) -> list[tuple[bool, str]]:
    """(good news?, sentence) for an admin message or a command's output."""
    if not applied.managed:
        return [(True, "MAC_ALERTMANAGER_MANAGED=0: the site's Alertmanager keeps its own routes.")]
    said: list[tuple[bool, str]] = []
    names = dict(NotificationChannel.objects.values_list("pk", "name"))
    for pk, error in applied.left_out.items():
        said.append((False, f"{names.get(pk, pk)!r} is left out of alertmanager.yml: {error}"))
    for pk, why in applied.held.items():
        said.append((False, f"{names.get(pk, pk)!r} is held back: {why}."))
    if applied.write_error:
        said.append((False, f"Saved, but not in use yet: {applied.write_error}."))
    elif applied.config_error:
        said.append((False, f"alertmanager.yml kept as it was: {applied.config_error}"))
    elif applied.reload_error:
        why = applied.reload_error
        said.append((False, f"Alertmanager not reloaded ({why}); MAC retries on its next poll."))
    elif applied.reloaded:
        said.append(
            (True, f"Alertmanager reloaded with {len(applied.included)} channel(s) in use.")
        )
    return said


def send_test_notification(
    channel: NotificationChannel, *, actor: str, client: Alertmanager | None = None
) -> str:
    """Send a test alert through Alertmanager (API v2) that only this channel receives.

    Alertmanager delivers it as it would a real alert (same receiver, same templates),
    at once (its route has group_wait 0s), so a test that arrives proves the whole path.
    Returns what was sent, in words; raises ChannelError when it cannot be sent.
    """
    if not settings.ALERTMANAGER_MANAGED:
        raise ChannelError(
            "MAC does not manage this Alertmanager's routes (MAC_ALERTMANAGER_MANAGED=0): "
            "test the site's own receivers there."
        )
    if not channel.enabled:
        raise ChannelError(f"{channel.name} is disabled: enable it first.")
    applied = apply_channels(client=client)
    if channel.pk in applied.left_out:
        raise ChannelError(
            f"{channel.name} is left out of alertmanager.yml: {applied.left_out[channel.pk]}"
        )
    if channel.pk in applied.held:
        raise ChannelError(f"{channel.name} is held back: {applied.held[channel.pk]}")
    if applied.write_error:
        raise ChannelError(applied.write_error)
    if applied.reload_error:
        raise ChannelError(f"Alertmanager could not take the configuration: {applied.reload_error}")
    now = timezone.now()
    alert = {
        "labels": {
            "alertname": "MacTestNotification",
            "severity": "info",
            "cluster_name": settings.CLUSTER_NAME,
            TEST_LABEL: str(channel.pk),
            "mac_test_id": uuid.uuid4().hex[:12],
        },
        "annotations": {
            "summary": f"Test notification from MAC to the channel {channel.name}",
            "description": f"Sent by {actor} from the MAC admin; it resolves by itself "
            f"in {TEST_ALERT_MINUTES} minutes.",
        },
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(minutes=TEST_ALERT_MINUTES)).isoformat(),
    }
    try:
        with bulkheads.ALERTMANAGER.slot():
            (client or Alertmanager.from_settings()).post_alerts([alert])
    except (AlertmanagerUnavailable, bulkheads.BulkheadFull) as exc:
        raise ChannelError(f"the test alert was not accepted: {exc}") from None
    return f"test alert sent through Alertmanager to {channel.name} ({channel.get_kind_display()})"


def channels_from_env() -> list[str]:
    """Create or update the channels MAC_ALERT_WEBHOOK_URL and MAC_ALERT_EMAIL_TO describe.

    Idempotent: each has a fixed name, and running again only updates what changed.
    Returns one line per channel saying what happened; raises ChannelError naming the
    variable at fault.
    """
    said = []
    if settings.ALERT_WEBHOOK_URL:
        said.append(
            _env_channel(
                WEBHOOK_FROM_ENV,
                {"kind": ChannelKind.WEBHOOK, "url": settings.ALERT_WEBHOOK_URL},
                {"url": "MAC_ALERT_WEBHOOK_URL"},
            )
        )
    if settings.ALERT_EMAIL_TO:
        said.append(
            _env_channel(
                EMAIL_FROM_ENV,
                {
                    "kind": ChannelKind.EMAIL,
                    "email_to": settings.ALERT_EMAIL_TO,
                    "smtp_host": settings.SMTP_HOST,
                    "smtp_port": settings.SMTP_PORT,
                    "smtp_user": settings.SMTP_USER,
                    "smtp_password": settings.SMTP_PASSWORD,
                    "smtp_from": settings.SMTP_FROM,
                    "smtp_require_tls": settings.SMTP_TLS,
                },
                {
                    "email_to": "MAC_ALERT_EMAIL_TO",
                    "smtp_host": "MAC_SMTP_HOST",
                    "smtp_port": "MAC_SMTP_PORT",
                    "smtp_from": "MAC_SMTP_FROM",
                },
            )
        )
    return said


def _env_channel(name: str, values: dict, variables: dict[str, str]) -> str:
    channel = NotificationChannel.objects.filter(name=name).first()
    created = channel is None
    channel = channel or NotificationChannel(name=name, created_by=ENV_ACTOR)
    changed = [key for key, value in values.items() if getattr(channel, key) != value]
    for key in changed:
        setattr(channel, key, values[key])
    problems = channel_errors(channel, destinations=False)
    where = destinations.destination(channel)
    # A name that does not resolve yet (the master starting before its DNS, at boot) does
    # not stop the start: the generation holds the channel back until it resolves.
    if not problems and where and (why := destinations.refusal(where, unresolved_ok=True)):
        problems = {where.field: [why]}
    if problems:
        field_name, messages = next(iter(problems.items()))
        variable = variables.get(field_name, field_name)
        raise ChannelError(f"{variable}: {' '.join(messages)}")
    if created or changed:
        channel.save()
        return f"{'Created' if created else 'Updated'} the channel {name!r}."
    return f"The channel {name!r} is up to date."
