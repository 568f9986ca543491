"""Routes of the alerting API under /api/v1/."""

from rest_framework.routers import SimpleRouter

from alerting.api import views

router = SimpleRouter()
router.register("alert-channels", views.NotificationChannelViewSet, basename="alert-channel")

urlpatterns = router.urls
