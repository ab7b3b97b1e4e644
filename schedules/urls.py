from __future__ import annotations

from django.urls import path

from schedules import views

app_name = "schedules"
urlpatterns = [
    path("", views.schedule_list, name="list"),
    path("schedules/new/", views.schedule_create, name="create"),
    path("schedules/new/preview/", views.limits_preview, name="preview"),
    path("schedules/<int:pk>/", views.schedule_detail, name="detail"),
    path("schedules/<int:pk>/edit/", views.schedule_edit, name="edit"),
    path("schedules/<int:pk>/pause/", views.pause, name="pause"),
    path("schedules/<int:pk>/resume/", views.resume, name="resume"),
    path("settings/", views.notification_settings, name="settings"),
    path("settings/rotate-secret/", views.rotate_webhook_secret, name="rotate_secret"),
    path("settings/test/", views.send_test_notification, name="test_notification"),
]
