from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from schedules import urls as dashboard

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("schedules.api.urls")),
    # The demo's hint about its printed passwords is shown in development only.
    path(
        "login/", auth_views.LoginView.as_view(extra_context={"demo": not settings.PRODUCTION}), name="login"
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("schedules.urls")),
    path("", include((dashboard.run_urls, "runs"))),
    path("", include((dashboard.budget_urls, "accounting"))),
]

if settings.SIMULATOR_ENABLED:
    from runs.views import simulator, webhook_sink

    urlpatterns += [
        path("simulator/v1/chat/completions", simulator, name="simulator"),
        path("simulator/webhook/", webhook_sink, name="webhook_sink"),
    ]
