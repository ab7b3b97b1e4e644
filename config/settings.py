"""Settings, read once from the environment (see the configuration table in README.md).

APP_ENV=development (the default) runs on the embedded PostgreSQL of `./dev run` unless
DATABASE_URL names another server, with the simulated provider on.
APP_ENV=production requires SECRET_KEY, ALLOWED_HOSTS and DATABASE_URL and turns on every
deployment-checklist setting, so `manage.py check --deploy` is clean.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import (
    database_from_url,
    env_bool,
    env_choice,
    env_fraction,
    env_int,
    env_list,
    env_money,
    env_seconds,
    env_site_url,
    env_str,
    env_timezone,
)

BASE_DIR = Path(__file__).resolve().parent.parent

APP_ENV = env_choice("APP_ENV", "development", ("development", "production"))
PRODUCTION = APP_ENV == "production"

DEBUG = env_bool("DEBUG", default=not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG must be off when APP_ENV=production.")

if PRODUCTION:
    SECRET_KEY = env_str("SECRET_KEY", required=True)
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise ImproperlyConfigured("SECRET_KEY must be at least 50 characters with 5 or more distinct ones.")
else:
    SECRET_KEY = env_str("SECRET_KEY", "development-only-key-not-for-production-0123456789abcdef")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when APP_ENV=production.")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "django_q",
    "axes",
    "accounting",
    "runs",
    "schedules",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.security_headers",
    "config.middleware.refuse_overlong_urls",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.refuse_nul_characters",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounting.context_processors.budget_headroom",
            ],
        },
    },
]

# PostgreSQL is the only engine (docs/decisions/0003-one-engine.md). Without DATABASE_URL, development
# talks to the embedded server of `./dev run` (config.embedded), wherever its socket is.
if PRODUCTION:
    _database_url = env_str("DATABASE_URL", required=True)
else:
    from config.embedded import default_url

    _database_url = env_str("DATABASE_URL", default_url())
DATABASES = {"default": database_from_url(_database_url)}
# A connection pool per process (psycopg's, through Django): a thread takes a connection for each stretch
# of reads and writes and gives it back, so the runs in flight in a worker share a few connections
# instead of holding one each while they wait on providers (docs/decisions/ 0005-runs-in-flight.md). A
# forked process forgets the pool it inherited (runs.apps).
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 4, minimum=1, maximum=100)
# How long a thread waits for a connection before an error: a free one of the pool, or one from a
# server that is not answering. A management command asks the server once before it runs and waits
# as long at most (config.database), so a server that is down is said in one line, not waited on.
DATABASE_POOL_TIMEOUT_SECONDS = env_seconds("DATABASE_POOL_TIMEOUT_SECONDS", "60")
DATABASES["default"]["CONN_MAX_AGE"] = 0  # pooled: a closed connection goes back to the pool
DATABASES["default"]["OPTIONS"]["pool"] = {
    "min_size": 0,
    "max_size": DATABASE_POOL_SIZE,
    "timeout": DATABASE_POOL_TIMEOUT_SECONDS,
    "max_idle": 60,  # an idle connection is closed after this
}
# Parameters travel separately from the SQL instead of being quoted into it by the client: the
# tick's bulk writes are about 1.5x faster. Turn off behind a transaction-pooling proxy.
_server_side = env_bool("DATABASE_SERVER_SIDE_BINDING", True)
DATABASES["default"]["OPTIONS"]["server_side_binding"] = _server_side
# With it, psycopg prepares a statement a connection has run 5 times (the run loop's step, the
# tick's batch): parsed once per connection, not on every call (Django turns this off). Each
# execution is still planned for its own values: a generic plan cannot use a partial index
# (the due schedules, the open reservations, the month rollups) whose condition is a parameter.
# The run loop's step statement, which touches no such index, runs on a generic plan (runs.steps).
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5 if _server_side else None
if _server_side:
    _given = DATABASES["default"]["OPTIONS"].get("options", "")
    DATABASES["default"]["OPTIONS"]["options"] = f"{_given} -c plan_cache_mode=force_custom_plan".strip()
# Each worker's waker LISTENs for queued runs and new slots (schedules.waker) on a session of its
# own, which a transaction-pooling proxy (PgBouncer in transaction mode) cannot keep: behind one,
# name the server itself here (same database and role); empty, the waker uses DATABASE_URL.
_listen_url = env_str("DATABASE_LISTEN_URL", "")
DATABASE_LISTEN = database_from_url(_listen_url) if _listen_url else None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out sign-in before the password check
    "django.contrib.auth.backends.ModelBackend",
]
# Sign-in throttling (django-axes): after SIGN_IN_FAILURE_LIMIT wrong passwords for one user name,
# or from one address, that name or address is locked out for SIGN_IN_LOCKOUT_MINUTES. A correct
# sign-in resets the count; an admin resets a lockout in the admin or with `manage.py axes_reset`.
AXES_FAILURE_LIMIT = env_int("SIGN_IN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("SIGN_IN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
# The proxies in front of the web server that append to X-Forwarded-For: throttling keys on the
# address the nearest one saw, not on theirs. 0 (the default) trusts no header at all: with no
# proxy in front, a client writing its own X-Forwarded-For would pick a new address per request
# and never be locked out. The deployment guide's one TLS-terminating proxy sets it to 1; the web
# server says at start-up which rule is in force (config.http.client_address_rule).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0, maximum=5)
AXES_CLIENT_IP_CALLABLE = "config.http.client_address"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "schedules:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
if not PRODUCTION:
    # Served straight from the apps' static folders, no collectstatic needed in development.
    WHITENOISE_USE_FINDERS = True
    WHITENOISE_AUTOREFRESH = True
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# Security: the deployment checklist, on in production.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    if TRUSTED_PROXY_COUNT:  # only a proxy we trust may say the client spoke https
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "config.logfilters.ClientErrorsOnOneLine",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING"))},
    # httpx logs every request line at INFO; provider URLs carry no secrets, but keep the noise down.
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # django-axes logs every failed sign-in at INFO; the lockouts themselves are WARNING.
        "axes": {"level": "WARNING"},
        # django-q2 logs a line per enqueued task at INFO; a tick of thousands would flood the log.
        "django-q": {"level": env_choice("Q_LOG_LEVEL", "WARNING", ("DEBUG", "INFO", "WARNING"))},
    },
}

EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "schedules@localhost")
# Links in notifications. In development the default is the address `./dev run` serves (its PORT),
# so the demo's notices point at the server actually running; in production set it.
SITE_URL = env_site_url(
    "SITE_URL",
    None if PRODUCTION else f"http://127.0.0.1:{env_int('PORT', 8000, minimum=1, maximum=65535)}",
    https=PRODUCTION,
)

# ---------------------------------------------------------------------------------------------
# The product (docs/contract.md). Money is Decimal everywhere.
# ---------------------------------------------------------------------------------------------

DEFAULT_OWNER_TIME_ZONE = env_timezone("DEFAULT_OWNER_TIME_ZONE", "UTC")
# Per-owner overrides live on accounting.OwnerBudget and are editable in the admin.
SCHEDULE_COST_CEILING = env_money("SCHEDULE_COST_CEILING", "10.00")
DAILY_COST_CEILING = env_money("DAILY_COST_CEILING", "25.00")
MONTHLY_COST_CEILING = env_money("MONTHLY_COST_CEILING", "250.00")

# Per-owner caps (per-owner overrides on accounting.OwnerBudget): active schedules at once, and the
# shortest interval between fires of a schedule a model creates or changes in chat.
MAX_ACTIVE_SCHEDULES = env_int("MAX_ACTIVE_SCHEDULES", 100, minimum=1, maximum=100_000)
CHAT_MIN_INTERVAL_MINUTES = env_int("CHAT_MIN_INTERVAL_MINUTES", 15, minimum=1, maximum=10_080)

SCHEDULE_GRACE_SECONDS = env_int("SCHEDULE_GRACE_SECONDS", 15 * 60, minimum=0)
SCHEDULE_TICK_BATCH = env_int("SCHEDULE_TICK_BATCH", 500, minimum=1)
SCHEDULE_MAX_PROMPT_CHARS = env_int("SCHEDULE_MAX_PROMPT_CHARS", 20_000, minimum=1)
# The longest message an owner may send in a conversation (dashboard and API).
CONVERSATION_MESSAGE_MAX_CHARS = env_int("CONVERSATION_MESSAGE_MAX_CHARS", 8_000, minimum=1)

# Interactive runs whose caller gives no limits (docs/decisions/0001, amendment): reserves of 1 step, 1
# model call, 0 tool calls and 10 % of max_cost, each kept only when below its total.
INTERACTIVE_RESERVE_STEPS = env_int("INTERACTIVE_RESERVE_STEPS", 1, minimum=0)
INTERACTIVE_RESERVE_MODEL_CALLS = env_int("INTERACTIVE_RESERVE_MODEL_CALLS", 1, minimum=0)
INTERACTIVE_RESERVE_TOOL_CALLS = env_int("INTERACTIVE_RESERVE_TOOL_CALLS", 0, minimum=0)
INTERACTIVE_RESERVE_COST_FRACTION = env_fraction("INTERACTIVE_RESERVE_COST_FRACTION", "0.10")

# Provider calls stream (docs/decisions/0006-streaming.md). A call is cut when its provider has not
# begun the answer within the first-token timeout (long enough for a reasoning model that thinks
# before it writes), or once it has begun, sends nothing for the idle timeout; never while it streams
# steadily, and never past the run's deadline. A cut call is charged an estimate.
PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS = env_seconds("PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS", "300")
PROVIDER_IDLE_TIMEOUT_SECONDS = env_seconds("PROVIDER_IDLE_TIMEOUT_SECONDS", "60")
PROVIDER_MAX_RETRIES = env_int("PROVIDER_MAX_RETRIES", 3, minimum=0, maximum=10)
PROVIDER_BACKOFF_BASE_SECONDS = env_seconds("PROVIDER_BACKOFF_BASE_SECONDS", "0.5")
PROVIDER_BACKOFF_CAP_SECONDS = env_seconds("PROVIDER_BACKOFF_CAP_SECONDS", "20")

RUN_MAX_SECONDS = env_int("RUN_MAX_SECONDS", 30 * 60, minimum=10)
# Each model request carries an output cap (docs/contract.md#bounded-before-the-call): at most the
# agent's maximum output per call, less when the dollars left pay for less; below MIN_OUTPUT_TOKENS (or
# the agent's maximum, if that is lower) no call is made. A provider that reports its own charge
# (OpenRouter) is bounded with REPORTED_COST_MARGIN on top of the catalogue's prices.
MIN_OUTPUT_TOKENS = env_int("MIN_OUTPUT_TOKENS", 256, minimum=1, maximum=200_000)
REPORTED_COST_MARGIN = env_fraction("REPORTED_COST_MARGIN", "0.10")
RUN_HEARTBEAT_SECONDS = env_int("RUN_HEARTBEAT_SECONDS", 10, minimum=1)
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 90, minimum=2)
if RUN_LEASE_SECONDS <= RUN_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("RUN_LEASE_SECONDS must be longer than RUN_HEARTBEAT_SECONDS.")
# Runs in flight together in one django-q2 worker process, each on its own thread, waiting on
# their providers concurrently (runs.inflight); and open requests to one provider and base URL
# from one worker process at once (runs.providers.gate).
RUNS_IN_FLIGHT_PER_WORKER = env_int("RUNS_IN_FLIGHT_PER_WORKER", 100, minimum=1, maximum=2000)
PROVIDER_CONCURRENCY_PER_WORKER = env_int("PROVIDER_CONCURRENCY_PER_WORKER", 50, minimum=1, maximum=2000)
# The host a worker process names itself by in the runs it claims ("host:pid", runs.services),
# which the dashboard, the API and the admin show: the machine's name unless the operator gives
# one (a container's hostname is a random id).
WORKER_HOST = env_str("WORKER_HOST", socket.gethostname())[:80] or socket.gethostname()[:80]

SIMULATOR_ENABLED = env_bool("SIMULATOR_ENABLED", not PRODUCTION)

# Outbound HTTP to URLs people choose (runs.outbound): in production only public addresses, and
# the connection goes to the address that was checked. Hosts listed here skip the address check
# (a self-hosted vLLM or Ollama on a private network).
ALLOW_PRIVATE_ADDRESSES = env_bool("ALLOW_PRIVATE_ADDRESSES", not PRODUCTION)
PROVIDER_ALLOWED_HOSTS = env_list("PROVIDER_ALLOWED_HOSTS", [])
# An agent names the environment variable holding its API key; only names matching this glob,
# and never one of the variables these settings read (config.env.READ).
PROVIDER_API_KEY_PATTERN = env_str("PROVIDER_API_KEY_PATTERN", "*_API_KEY")

HTTP_FETCH_ALLOWED_HOSTS = env_list("HTTP_FETCH_ALLOWED_HOSTS", [])
HTTP_FETCH_MAX_BYTES = env_int("HTTP_FETCH_MAX_BYTES", 200_000, minimum=1)
HTTP_FETCH_TIMEOUT_SECONDS = env_int("HTTP_FETCH_TIMEOUT_SECONDS", 10, minimum=1, maximum=120)

API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 120, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("API_MAX_BODY_BYTES", 64 * 1024, minimum=1024)

# django-q2 runs occurrences; the ORM broker keeps the enqueue in our own transaction.
# timeout must outlast the longest run, and retry must outlast timeout plus time in the queue,
# or a live task is handed to a second worker (schedules.checks verifies both).
Q_WORKERS = env_int("Q_WORKERS", 2, minimum=1, maximum=64)
# A model call is cut at the run's deadline (runs.watch); the time limit is checked before each
# request and each tool call, so a run can overrun it by one backoff, one tool call, and a
# connection's setup.
LONGEST_RUN_SECONDS = (
    RUN_MAX_SECONDS + int(PROVIDER_BACKOFF_CAP_SECONDS) + max(HTTP_FETCH_TIMEOUT_SECONDS, 10) + 30
)
Q_TIMEOUT_SECONDS = LONGEST_RUN_SECONDS + 60
Q_POLL_SECONDS = env_seconds("Q_POLL_SECONDS", "2")
# How long after its last turn a worker's waker takes one unasked (schedules/waker.py): the longest
# a queued run waits when its notification was lost, or its task died with another host.
WAKER_FALLBACK_SECONDS = env_seconds("WAKER_FALLBACK_SECONDS", "2")
Q_RETRY_SECONDS = Q_TIMEOUT_SECONDS + 300
Q_CLUSTER = {
    "name": "schedules",
    "orm": "default",
    "workers": Q_WORKERS,
    "timeout": Q_TIMEOUT_SECONDS,
    "retry": Q_RETRY_SECONDS,
    "max_attempts": 1,
    "catch_up": False,
    "ack_failures": True,
    # A successful task leaves no row: what a turn did is on its runs, their occurrences and their
    # accounting events, and nothing reads django-q2's results (its admin is not shown). Keeping the
    # last N made the monitor load all N rows, for each task, to count them: a tenth of the
    # cluster's CPU in a burst of 1,000 runs. Failures are kept, as always.
    "save_limit": -1,
    # The broker's poll is the fallback: queued runs and schedule slots wake the workers at once
    # (PostgreSQL LISTEN/NOTIFY, schedules.waker); the poll still delivers the minute's tick, the
    # reaper and the notices, and a task whose notification was lost.
    "poll": Q_POLL_SECONDS,
    "bulk": 10,  # tasks the pusher takes from the queue per round trip
    # A worker process ends after this many tasks and waits for its runs in flight first;
    # a task is a turn at claiming one run (runs.inflight), so this many runs.
    "recycle": 5000,
    "label": "Task queue",
    "log_level": LOGGING["loggers"]["django-q"]["level"],  # type: ignore[index]
}
