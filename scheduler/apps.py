"""The scheduler app's configuration (its models: what the drain remembers and the jobs,
scheduler.models); the GPU alerts ask it which jobs held a faulty GPU (alerting.gpualerts)."""

from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alerting.gpualerts import gpu_jobs
        from scheduler.jobread import alert_jobs

        gpu_jobs.connect(alert_jobs, dispatch_uid="scheduler.jobread.alert_jobs")
