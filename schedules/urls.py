from __future__ import annotations

from django.urls import path

from schedules import views

app_name = "schedules"
urlpatterns = [
    path("", views.schedule_list, name="list"),
]
