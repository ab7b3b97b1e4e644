"""Staff holding exactly one admin permission reach exactly that power: no other model's pages,
no other owner's content outside the model that holds it, no secret anywhere, no token for
someone else, and no agent credentials without the credentials permission.

The table is every permission of every model the admin shows (and the custom ones), crossed with
every admin page of every model; it is built from the admin registry, so a model registered
later is covered without anyone remembering to add it.
"""

from __future__ import annotations

import json
import os

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse

from runs.models import Agent, AgentCredentialChange, Conversation, ConversationAgentChange
from schedules import notices, tokens
from schedules.models import ApiToken, Schedule
from tests.factories import fail, make_agent, make_schedule, make_user, materialize

pytestmark = pytest.mark.django_db

PROMPT = "PROMPT-OF-OLGA-7781"
SECRET_VALUE = "sk-live-SECRET-VALUE-0042"
# Content that belongs to the owner and lives on these models' pages only.
CONTENT_MODELS = {("runs", "run"), ("schedules", "schedulerevision")}


@pytest.fixture
def world(owner, monkeypatch, settings):
    # Thousands of requests: sessions in the cache, not a table (what is checked is what each
    # page shows, not where sessions are kept).
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cache"
    monkeypatch.setenv("OLGA_API_KEY", SECRET_VALUE)
    agent = make_agent("keyed", model="sim-bad-param")  # echoes the prompt into its message
    Agent.objects.filter(pk=agent.pk).update(api_key_setting="OLGA_API_KEY")
    schedule = make_schedule(owner, agent, prompt=f"Summarise {PROMPT}")
    run = fail(materialize(schedule))
    owner.email = "olga@example.com"
    owner.save()
    _, webhook_secret = notices.update_notification_settings(
        owner, email_enabled=True, webhook_enabled=True, webhook_url="http://localhost:9/hook"
    )
    _, token_secret = tokens.create_api_token(owner, name="olga's", scopes=["read"], by=owner)
    return {
        "objects": [schedule, run, run.conversation, agent],
        "secrets": [SECRET_VALUE, webhook_secret, token_secret, ApiToken.objects.get().token_hash],
    }


def admin_models() -> list[type]:
    return sorted(admin.site._registry, key=lambda m: m._meta.label)


def pages(model: type) -> dict[str, str]:
    """The model's admin pages: its changelist, add page, and the pages of one object."""
    opts = model._meta
    name = f"admin:{opts.app_label}_{opts.model_name}"
    urls = {"changelist": reverse(f"{name}_changelist"), "add": reverse(f"{name}_add")}
    first = model._default_manager.order_by("pk").first()
    if first is not None:
        for page in ("change", "delete", "history"):
            urls[page] = reverse(f"{name}_{page}", args=[first.pk])
        if opts.label == "schedules.Schedule":
            urls["pin"] = reverse("admin:schedules_schedule_pin", args=[first.pk])
    return urls


def permissions(app_label: str) -> list[Permission]:
    types = [ContentType.objects.get_for_model(m) for m in admin_models()]
    found = Permission.objects.filter(content_type__in=types, content_type__app_label=app_label)
    return list(found.select_related("content_type").order_by("pk"))


def granted(permission: Permission, model: type, page: str) -> bool:
    """What the one permission may reach, at most (an admin may be stricter)."""
    codename, opts = permission.codename, model._meta
    if codename == "pin_revision":
        return opts.label == "schedules.Schedule" and page == "pin"
    if (
        permission.content_type.model != opts.model_name
        or permission.content_type.app_label != opts.app_label
    ):
        return False
    action = codename.split("_", 1)[0]
    return {
        "changelist": action in ("view", "change"),
        "change": action in ("view", "change"),
        "history": action in ("view", "change"),
        "add": action == "add",
        "delete": action == "delete",
    }.get(page, False)


def staff_with(permission: Permission) -> Client:
    user = make_user(f"staff-{permission.content_type.app_label}-{permission.codename}", staff=True)
    user.user_permissions.add(permission)
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.get(pk=user.pk))
    return client


@pytest.mark.parametrize("app_label", ["accounting", "runs", "schedules", "auth", "django_q"])
def test_staff_with_one_permission_reach_no_page_and_no_content_beyond_it(world, app_label):
    problems = []
    assert permissions(app_label)
    every_page = {model: pages(model) for model in admin_models()}  # GETs: the objects stay as they are
    for permission in permissions(app_label):
        client = staff_with(permission)
        for model, urls in every_page.items():
            for page, url in urls.items():
                response = client.get(url)
                reached = response.status_code == 200
                text = response.content.decode(errors="replace")
                label = f"{permission.codename} -> {model._meta.label} {page}"
                if reached and not granted(permission, model, page):
                    problems.append(f"{label}: reached without the permission")
                if any(secret in text for secret in world["secrets"]):
                    problems.append(f"{label}: shows a secret")
                owner_content = (model._meta.app_label, model._meta.model_name) in CONTENT_MODELS
                if PROMPT in text and not (owner_content and granted(permission, model, page)):
                    problems.append(f"{label}: shows an owner's prompt")
    assert problems == []


def test_even_a_superuser_sees_no_secret_on_any_admin_page(world, admin_user):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    for model in admin_models():
        for page, url in pages(model).items():
            text = client.get(url).content.decode(errors="replace")
            assert not any(secret in text for secret in world["secrets"]), f"{model._meta.label} {page}"


# -- tokens ----------------------------------------------------------------------------------------


def _token_form(user_pk: int, *scopes: str) -> dict[str, object]:
    return {"user": user_pk, "name": "mine", "scopes": list(scopes)}


def test_staff_who_may_add_tokens_make_them_for_themselves_only(owner, admin_user):
    staff = make_user("tokenist", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_apitoken", "view_apitoken"]))
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))

    for target in (owner, admin_user):  # someone else, and a superuser
        response = client.post(reverse("admin:schedules_apitoken_add"), _token_form(target.pk, "read"))
        assert response.status_code == 200 and "errorlist" in response.text
        assert not ApiToken.objects.filter(user=target).exists()
    response = client.post(reverse("admin:schedules_apitoken_add"), _token_form(staff.pk, "read", "write"))
    assert response.status_code == 302
    assert ApiToken.objects.get(user=staff).scopes == ["read", "write"]


def test_a_token_cannot_carry_a_scope_its_user_does_not_hold(owner):
    staff = make_user("tokenist", staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="add_apitoken"))
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))

    response = client.post(
        reverse("admin:schedules_apitoken_add"), _token_form(staff.pk, "read", "pin_revision")
    )

    assert response.status_code == 200 and "lacks the pin permission" in response.text
    assert not ApiToken.objects.exists()


def test_a_superuser_may_make_a_token_for_someone_else(owner, admin_user):
    client = Client()
    client.force_login(admin_user)
    response = client.post(reverse("admin:schedules_apitoken_add"), _token_form(owner.pk, "read"))
    assert response.status_code == 302 and ApiToken.objects.get().user == owner


def test_staff_see_and_revoke_only_their_own_tokens(owner):
    tokens.create_api_token(owner, name="olga's", scopes=["read"], by=owner)
    staff = make_user("tokenist", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_apitoken", "change_apitoken"]))
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))
    assert "olga&#x27;s" not in client.get(reverse("admin:schedules_apitoken_changelist")).text
    token = ApiToken.objects.get()
    assert client.get(reverse("admin:schedules_apitoken_change", args=[token.pk])).status_code == 302


def test_the_command_refuses_a_scope_the_user_lacks(owner, capsys):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="lacks the pin permission"):
        call_command("create_api_token", owner.username, "--scopes", "read,pin_revision")
    assert not ApiToken.objects.exists()


# -- agent credentials -----------------------------------------------------------------------------


def _agent_form(agent: Agent, **changes: str) -> dict[str, str]:
    form = {
        "name": agent.name,
        "provider": agent.provider,
        "model": agent.model,
        "base_url": agent.base_url,
        "api_key_setting": agent.api_key_setting,
        "system_prompt": "",
        "tools": '["clock.now"]',
        "price_input": "3.00",
        "price_output": "15.00",
        "default_limits": json.dumps(agent.default_limits),
        "cost_limit": "",
        "history_turns": "20",
        "history_tokens": "12000",
        "max_output_tokens": str(agent.max_output_tokens),
        "is_active": "on",
        "credential_changes-TOTAL_FORMS": "0",
        "credential_changes-INITIAL_FORMS": "0",
    }
    form.update(changes)
    return form


def _staff(*codenames: str) -> Client:
    staff = make_user("agent-keeper", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))
    return client


def test_change_agent_alone_cannot_point_an_agent_at_a_server_secret():
    agent = make_agent("victim")
    client = _staff("change_agent", "view_agent")
    url = reverse("admin:runs_agent_change", args=[agent.pk])
    response = client.post(
        url,
        _agent_form(
            agent, api_key_setting="DATABASE_URL", base_url="https://attacker.example/v1", model="m2"
        ),
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    assert (agent.api_key_setting, agent.base_url, agent.model) == ("", "", "m2")  # the rest saved
    assert not AgentCredentialChange.objects.exists()
    assert client.get(reverse("admin:runs_agent_add")).status_code == 403  # adding sets credentials


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("DATABASE_URL", "must match *_API_KEY"),
        ("SECRET_KEY", "must match *_API_KEY"),
        ("EMAIL_HOST_PASSWORD", "must match *_API_KEY"),
        ("openai_api_key", "in capitals"),
        ("OPENAI_API_KEY; rm", "in capitals"),
    ],
)
def test_the_api_key_setting_must_name_a_key_variable(name, why):
    agent = make_agent("victim")
    client = _staff("change_agent", "view_agent", "change_agent_credentials")
    response = client.post(
        reverse("admin:runs_agent_change", args=[agent.pk]), _agent_form(agent, api_key_setting=name)
    )
    assert response.status_code == 200 and why in response.text
    agent.refresh_from_db()
    assert agent.api_key_setting == ""


def test_a_key_variable_the_settings_read_is_refused_even_if_it_matches(settings):
    from config import env
    from runs.models import api_key_setting_problem

    env.READ.add("BILLING_API_KEY")  # a setting of ours that happens to match the pattern
    try:
        assert "settings read" in api_key_setting_problem("BILLING_API_KEY")
    finally:
        env.READ.discard("BILLING_API_KEY")


def test_with_the_credentials_permission_a_change_is_recorded_who_when_old_and_new():
    agent = make_agent("victim")
    client = _staff("change_agent", "view_agent", "change_agent_credentials")
    response = client.post(
        reverse("admin:runs_agent_change", args=[agent.pk]),
        _agent_form(
            agent, api_key_setting="OPENAI_API_KEY", base_url="https://api.openai.com/v1", provider="openai"
        ),
    )
    assert response.status_code == 302
    rows = {
        c.field: (c.old_value, c.new_value, c.changed_by.username)
        for c in AgentCredentialChange.objects.all()
    }
    assert rows == {
        "provider": ("simulated", "openai", "agent-keeper"),
        "base_url": ("", "https://api.openai.com/v1", "agent-keeper"),
        "api_key_setting": ("", "OPENAI_API_KEY", "agent-keeper"),
    }


def test_a_stored_forbidden_key_setting_fails_the_run_before_anything_is_sent(owner, monkeypatch):
    from tests.runs.wire import OPENAI, Provider, execute, make_wire_agent

    monkeypatch.setenv("DATABASE_URL", os.environ.get("DATABASE_URL", "postgres://secret@db/x"))
    provider = Provider(OPENAI.answer())
    agent = make_wire_agent(OPENAI)
    Agent.objects.filter(pk=agent.pk).update(api_key_setting="DATABASE_URL")  # written around the admin
    agent.refresh_from_db()
    run = execute(owner, agent, provider)
    assert (run.status, run.error_class) == ("failed", "ProviderPermanentError")
    assert "api_key_setting must match" in run.failure_message
    assert provider.bodies == []


# -- powers used by POST: actions, and the user and group forms -----------------------------------


def powers() -> dict[str, object]:
    """Everything a POST beyond one's permission could change: who holds which power, which
    tokens exist, schedules' states, agents' credentials, and how many rows each model has."""
    return {
        "superusers": set(User.objects.filter(is_superuser=True).values_list("username", flat=True)),
        "staff": set(User.objects.filter(is_staff=True).values_list("username", flat=True)),
        "grants": set(User.user_permissions.through.objects.values_list("user_id", "permission_id")),
        "group_grants": set(Group.permissions.through.objects.values_list("group_id", "permission_id")),
        "tokens": {
            (u, tuple(scopes), at)
            for u, scopes, at in ApiToken.objects.values_list("user_id", "scopes", "revoked_at")
        },
        "schedules": set(Schedule.objects.values_list("pk", "status")),
        "agents": set(
            Agent.objects.values_list("pk", "provider", "base_url", "api_key_setting", "is_active")
        ),
        "rows": {m._meta.label: m._default_manager.count() for m in admin_models()},
    }


def may_act(permission: Permission, model: type, action: str) -> bool:
    """Whether holding `permission` allows running admin `action` on `model` at all."""
    codename, opts = permission.codename, model._meta
    if action in ("pause", "resume"):
        return codename == "pin_revision" and opts.label == "schedules.Schedule"
    same_model = (permission.content_type.app_label, permission.content_type.model) == (
        opts.app_label,
        opts.model_name,
    )
    needed = "delete" if action == "delete_selected" else "change"
    return same_model and codename.split("_", 1)[0] == needed


@pytest.mark.parametrize("app_label", ["accounting", "runs", "schedules", "auth", "django_q"])
def test_staff_with_one_permission_run_no_admin_action_beyond_it(world, admin_user, app_label):
    from django.test import RequestFactory

    everyone = RequestFactory().get("/")
    everyone.user = admin_user
    problems = []
    for permission in permissions(app_label):
        client = staff_with(permission)
        for model in admin_models():
            first = model._default_manager.order_by("pk").first()
            if first is None:
                continue
            opts = model._meta
            changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
            for action in admin.site._registry[model].get_actions(everyone):
                if may_act(permission, model, action):
                    continue
                before = powers()
                client.post(changelist, {"action": action, "_selected_action": [first.pk], "post": "yes"})
                if powers() != before:
                    problems.append(f"{permission.codename} ran {action} on {opts.label}")
    assert problems == []


def _staff_user(*codenames: str) -> tuple[User, Client]:
    staff = make_user("almost-admin", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.get(pk=staff.pk))
    return staff, client


def _user_form(user: User, **changes: object) -> dict[str, object]:
    return {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        **changes,
    }


def test_change_user_alone_cannot_make_anyone_superuser_or_grant_permissions(admin_user):
    staff, client = _staff_user("change_user", "view_user")
    pin = Permission.objects.get(codename="pin_revision")
    response = client.post(
        reverse("admin:auth_user_change", args=[staff.pk]),
        _user_form(staff, is_superuser="on", is_staff="on", user_permissions=[pin.pk], email="me@x.org"),
    )
    assert response.status_code == 302
    staff.refresh_from_db()
    assert staff.email == "me@x.org"  # what change_user is for
    assert not staff.is_superuser and not staff.user_permissions.filter(pk=pin.pk).exists()


def test_change_user_alone_cannot_touch_a_superuser_or_set_someone_elses_password(owner, admin_user):
    staff, client = _staff_user("change_user", "view_user")
    new = {"password1": "a fresh horse battery 42", "password2": "a fresh horse battery 42"}
    for target in (admin_user, owner):
        response = client.post(reverse("admin:auth_user_password_change", args=[target.pk]), new)
        assert response.status_code == 403
        target.refresh_from_db()
        assert not target.check_password(new["password1"])
    response = client.post(
        reverse("admin:auth_user_change", args=[admin_user.pk]), _user_form(admin_user, email="x@x.org")
    )
    assert response.status_code == 403
    admin_user.refresh_from_db()
    assert admin_user.email != "x@x.org"
    # Their own password stays theirs to change.
    response = client.post(reverse("admin:auth_user_password_change", args=[staff.pk]), new)
    assert response.status_code == 302


def test_change_group_alone_cannot_add_a_permission_to_a_group(admin_user):
    staff, client = _staff_user("change_group", "view_group")
    group = Group.objects.create(name="operators")
    staff.groups.add(group)
    pin = Permission.objects.get(codename="pin_revision")
    response = client.post(
        reverse("admin:auth_group_change", args=[group.pk]), {"name": "operators", "permissions": [pin.pk]}
    )
    assert response.status_code == 302
    assert not group.permissions.exists()
    assert not User.objects.get(pk=staff.pk).has_perm("schedules.pin_revision")


def test_a_superuser_still_grants(owner, admin_user):
    client = Client()
    client.force_login(admin_user)
    pin = Permission.objects.get(codename="pin_revision")
    response = client.post(
        reverse("admin:auth_user_change", args=[owner.pk]),
        _user_form(owner, is_staff="on", user_permissions=[pin.pk]),
    )
    assert response.status_code == 302
    assert User.objects.get(pk=owner.pk).has_perm("schedules.pin_revision")


# -- a conversation's agent --------------------------------------------------------------------------


def _conversation_of(owner) -> Conversation:
    from tests.factories import answered_conversation

    return answered_conversation(owner, make_agent("cheap-helper"))


def test_change_conversation_alone_cannot_switch_an_owners_conversation_to_another_agent(owner):
    conversation = _conversation_of(owner)
    dear = make_agent("dear-helper", input_price="75.00", output_price="150.00", tools=["http.fetch"])
    client = _staff("change_conversation", "view_conversation")
    url = reverse("admin:runs_conversation_change", args=[conversation.pk])
    page = client.get(url)
    assert page.status_code == 200 and 'name="agent"' not in page.text  # shown, not editable
    response = client.post(url, {"agent": dear.pk})
    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.agent.name == "cheap-helper"
    assert not ConversationAgentChange.objects.exists()


def test_with_the_credentials_permission_a_switch_is_recorded_who_when_old_and_new(owner):
    conversation = _conversation_of(owner)
    other = make_agent("other-helper")
    client = _staff("change_conversation", "view_conversation", "change_agent_credentials")
    url = reverse("admin:runs_conversation_change", args=[conversation.pk])
    assert 'name="agent"' in client.get(url).text
    assert client.post(url, {"agent": other.pk}).status_code == 302
    conversation.refresh_from_db()
    assert conversation.agent == other
    change = ConversationAgentChange.objects.get()
    assert (change.conversation_id, change.old_agent, change.new_agent) == (
        conversation.pk,
        "cheap-helper",
        "other-helper",
    )
    assert change.changed_by.username == "agent-keeper"
    assert "cheap-helper → other-helper" in client.get(url).text  # listed on the conversation


def test_the_switch_record_outlives_the_conversation(owner, admin_user):
    from runs import services as run_services

    conversation = _conversation_of(owner)
    run_services.change_conversation_agent(conversation, make_agent("other-helper"), by=admin_user)
    run_services.delete_conversation(conversation)
    assert ConversationAgentChange.objects.get().new_agent == "other-helper"
