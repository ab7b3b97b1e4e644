"""API tokens in the admin: made for yourself with scopes you hold (a superuser may make one for
anyone), shown once, revoked rather than deleted."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from schedules import tokens
from schedules.models import (
    ApiToken,
)


class ApiTokenForm(forms.ModelForm):  # type: ignore[type-arg]
    """A new token: for yourself (a superuser may choose anyone), with scopes its user holds."""

    scopes = forms.MultipleChoiceField(choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = ApiToken
        fields = ("user", "name", "scopes")

    by: Any = None  # who is asking; set per request by ApiTokenAdmin.get_form

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("user") is not None and cleaned.get("scopes"):
            try:
                tokens.check_token_request(cleaned["user"], list(cleaned["scopes"]), by=self.by)
            except (tokens.InvalidScopes, tokens.NotYours) as exc:
                self.add_error("scopes" if isinstance(exc, tokens.InvalidScopes) else "user", str(exc))
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        """Your own tokens; a superuser sees everyone's."""
        tokens_ = super().get_queryset(request)
        return tokens_ if request.user.is_superuser else tokens_.filter(user_id=request.user.pk)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiTokenForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.by = request.user  # type: ignore[attr-defined]  # a class made for this request
        return form

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = User.objects.filter(pk=request.user.pk or 0)
            kwargs["initial"] = request.user.pk
            kwargs["help_text"] = "A token is yours; only a superuser may create one for another user."
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("user", "name", "scopes")
        return ("user", "name", "scopes", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()
        return ("user", "name", "scopes", "prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        token, secret = tokens.create_api_token(
            form.cleaned_data["user"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            by=request.user,  # type: ignore[arg-type]
        )
        obj.pk = token.pk
        obj.refresh_from_db()
        messages.warning(
            request, f"Copy this token now; it is not stored and will not be shown again: {secret}"
        )

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        return self.response_post_save_add(request, obj)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = sum(tokens.revoke_api_token(token) for token in queryset)
        self.message_user(request, f"Revoked {revoked} token(s).")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead, so last use stays visible
