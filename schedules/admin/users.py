"""Users and groups in the admin, so that staff with one permission reach exactly that power.

Django's own UserAdmin lets anyone with `change_user` tick "superuser status" on themselves, give
themselves any permission, or set a superuser's password; GroupAdmin lets `change_group` add any
permission to a group its holder is in. Here, only a superuser grants: for everyone else the
privilege fields are read-only, superusers cannot be changed, and a password is set only for
yourself.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

PRIVILEGES = ("is_superuser", "is_staff", "groups", "user_permissions")


def _grants(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


class GuardedUserAdmin(UserAdmin):  # type: ignore[type-arg]
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if _grants(request) else (*readonly, *PRIVILEGES)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not _grants(request):
            return False  # else: a new password or address for a superuser, and their account
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not _grants(request):
            return False
        return super().has_delete_permission(request, obj)

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        if not _grants(request) and str(request.user.pk) != str(id):
            raise PermissionDenied  # setting someone else's password is signing in as them
        return super().user_change_password(request, id, form_url)


class GuardedGroupAdmin(GroupAdmin):
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if _grants(request) else (*readonly, "permissions")


admin.site.unregister(User)
admin.site.register(User, GuardedUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, GuardedGroupAdmin)
