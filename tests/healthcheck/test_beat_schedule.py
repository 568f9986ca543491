"""Every beat entry names a registered task, with an expiry below its interval."""

from __future__ import annotations

from macweb.celery import app


def test_every_scheduled_entry_resolves_to_a_registered_task(settings):
    app.loader.import_default_modules()
    schedule = app.conf.beat_schedule
    assert schedule, "the beat schedule is empty"
    for name, entry in schedule.items():
        assert entry["task"] in app.tasks, f"{name}: {entry['task']} is not registered"


def test_the_sweep_runs_every_probe_interval_and_expires_before_the_next(settings):
    entry = app.conf.beat_schedule["probe-fleet"]
    assert entry["task"] == "healthcheck.tasks.probe_fleet"
    assert entry["schedule"] == settings.PROBE_INTERVAL
    assert 0 < entry["options"]["expires"] < settings.PROBE_INTERVAL


def test_the_task_acknowledges_late():
    task = app.tasks["healthcheck.tasks.probe_fleet"]
    assert task.acks_late is True
    assert task.reject_on_worker_lost is True
    assert 0 < task.expires < task.app.conf.beat_schedule["probe-fleet"]["schedule"]
