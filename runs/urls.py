from __future__ import annotations

from django.urls import path

from runs import views

app_name = "runs"
urlpatterns = [
    path("runs/<int:pk>/", views.run_detail, name="detail"),
    path("conversations/", views.conversation_list, name="conversations"),
    path("conversations/<int:pk>/delete/", views.conversation_delete, name="delete_conversation"),
]
