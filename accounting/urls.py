from __future__ import annotations

from django.urls import path

from accounting import views

app_name = "accounting"
urlpatterns = [
    path("budget/", views.budget, name="budget"),
]
