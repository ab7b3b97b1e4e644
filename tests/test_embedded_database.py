"""The embedded PostgreSQL of the README's commands (config/embedded.py): it starts for a command,
hands it DATABASE_URL, stops when the command ends however it ends, leaves nothing behind, and
says in one line why when it cannot start. With DATABASE_URL set, nothing is started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from config import embedded
from config.env import database_from_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def wrapper(*command: str, env: dict[str, str] | None = None, **options: object) -> subprocess.Popen[str]:
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    return subprocess.Popen(
        [sys.executable, "-m", "config.embedded", "--temporary", "--quiet", "--", *command],
        cwd=ROOT,
        env={**environment, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,  # type: ignore[call-overload]
    )


def servers_of(data_marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["name"] == "postgres" and data_marker in cmdline:
            found.append(process)
    return found


PROBE = (
    "import os, psycopg; url = os.environ['DATABASE_URL']; print(url);"
    "print(psycopg.connect(url).execute('SELECT version()').fetchone()[0])"
)


def test_a_command_gets_a_running_postgresql_18_and_nothing_is_left_when_it_ends():
    process = wrapper(sys.executable, "-c", PROBE)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    url, version = out.strip().splitlines()[-2:]
    assert version.startswith("PostgreSQL 18")
    socket_dir = database_from_url(url)["HOST"]
    assert socket_dir.startswith("/") and "127.0.0.1" not in url  # a unix socket: no TCP port at all
    assert not servers_of(socket_dir) and not Path(socket_dir).exists()  # stopped, and its data deleted


SETTINGS = (
    "import os, psycopg; c = psycopg.connect(os.environ['DATABASE_URL']);"
    "print(*(c.execute(f'SHOW {name}').fetchone()[0] for name in ('fsync', 'synchronous_commit')))"
)


@pytest.mark.parametrize(("flags", "expected"), [((), "off off"), (("--durable",), "on on")])
def test_the_tests_server_skips_the_disk_and_the_benches_server_waits_for_it(flags, expected):
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    command = [sys.executable, "-m", "config.embedded", "--temporary", "--quiet", *flags]
    result = subprocess.run(
        [*command, "--", sys.executable, "-c", SETTINGS],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_the_command_s_exit_code_is_the_wrapper_s():
    process = wrapper(sys.executable, "-c", "import sys; sys.exit(5)")
    process.communicate(timeout=120)
    assert process.returncode == 5  # pytest's "no tests collected" must reach CI as it is


def test_a_sigterm_stops_the_command_as_ctrl_c_would_then_the_server():
    process = wrapper(
        sys.executable,
        "-c",
        "import os, signal, sys, time\n"
        "def stop(*args):\n    print('interrupted', flush=True)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print(os.environ['DATABASE_URL'], flush=True)\n"
        "time.sleep(60)",
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert "interrupted" in out
    assert not servers_of(database_from_url(url)["HOST"])


def test_a_sigterm_while_the_command_starts_reaches_the_command_once_it_has_started(monkeypatch, tmp_path):
    """The signal comes after the command's process exists and before Popen has returned it (a
    loaded machine can hold the wrapper there while the command starts): the command is told all
    the same, not orphaned with its server stopped under it."""
    heard = tmp_path / "heard"
    script = (
        "import signal, sys, time\n"
        f"def stop(*args):\n    open({str(heard)!r}, 'w').write('interrupted')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "time.sleep(60)"
    )
    command = [sys.executable, "-c", script]
    started: list[subprocess.Popen[bytes]] = []

    class SignalledWhileStarting(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            if args[0] != command:  # the server's own tools (initdb, pg_ctl) start as usual
                return
            started.append(self)
            time.sleep(1)  # the command sets its handler meanwhile, as a real start would have
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setattr(embedded.subprocess, "Popen", SignalledWhileStarting)
    begin = time.monotonic()
    try:
        code = embedded.run(command, data=None, temporary=True, quiet=True)
        assert time.monotonic() - begin < 30
        assert started and code == 0 and heard.read_text() == "interrupted"
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                pytest.fail("the command was left running")


def test_a_sigterm_while_the_server_starts_ends_the_start_and_leaves_nothing_behind():
    base = Path(tempfile.mkdtemp(prefix="start-", dir="/tmp"))
    process = wrapper("sleep", "60", env={"TMPDIR": str(base)})
    try:
        time.sleep(0.5)  # initdb or pg_ctl at work
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
        assert process.returncode != 0
        assert not servers_of(str(base)) and not list(base.glob("agent-schedules-pg-*"))
    finally:
        if process.poll() is None:
            process.kill()
        for server in servers_of(str(base)):
            server.kill()
        shutil.rmtree(base, ignore_errors=True)


def test_with_database_url_set_nothing_is_started():
    given = "postgres://someone@db.example.com:6543/theirs"
    process = wrapper(
        sys.executable, "-c", "import os; print(os.environ['DATABASE_URL'])", env={"DATABASE_URL": given}
    )
    out, _ = process.communicate(timeout=60)
    assert out.strip() == given


def test_a_second_command_on_the_same_data_adopts_the_running_server_and_leaves_it_running(tmp_path):
    data = tmp_path / "pg"
    first = embedded.Server(data, temporary=False)
    url = first.start()
    try:
        second = embedded.Server(data, temporary=False)
        assert second.start() == url and second.adopted
        second.stop()
        assert servers_of(str(data))  # still serving the first command
    finally:
        first.stop()
    assert not servers_of(str(data))
    assert embedded.default_url(data) == embedded.url_for(str(data))  # where its socket will be


def test_a_server_that_cannot_start_says_why_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    process = subprocess.run(
        [sys.executable, "-m", "config.embedded", "--data", str(blocker / "pg"), "--", "true"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode != 0
    assert process.stderr.count("\n") == 1 and "did not start: cannot create" in process.stderr


@pytest.mark.parametrize(
    ("log", "words"),
    [
        ("FATAL:  could not write to file: No space left on device", "is full"),
        ('FATAL:  lock file "postmaster.pid" already exists', "another PostgreSQL holds"),
        ("FATAL:  database files are incompatible with server", "another PostgreSQL version"),
        ('FATAL:  could not open file "global/pg_control": Permission denied', "permission denied"),
    ],
)
def test_each_known_failure_is_explained_with_what_to_do(tmp_path, log, words):
    (tmp_path / "log").write_text(f"LOG:  starting\n{log}\n")
    explanation = embedded._explain(tmp_path, RuntimeError("pg_ctl failed"))
    assert words in explanation and "\n" not in explanation


def test_too_little_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "MIN_FREE_BYTES", 10**18)
    assert "free some space" in embedded._problem(tmp_path / "pg")


def test_a_socket_url_is_read_as_libpq_reads_it():
    settings = database_from_url("postgres://postgres@/postgres?host=/tmp/x%20y/data&port=5433")
    assert (settings["HOST"], settings["PORT"], settings["NAME"]) == ("/tmp/x y/data", "5433", "postgres")
    assert settings["OPTIONS"] == {}


@pytest.mark.parametrize(
    "url", ["file:///var/db", "mysql://u@h/db", "mssql://u@h/db", "postgres://u@h:port/db"]
)
def test_only_postgresql_urls_are_accepted(url):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url(url)


BENCH = (
    "import time\n"
    "from tests.bench._setup import bench_database\n"
    "with bench_database('bench_stopped') as url:\n"
    "    print(url, flush=True)\n"
    "    time.sleep(300)\n"
)


@pytest.mark.parametrize(
    ("signum", "when"),
    [(signal.SIGTERM, "postgres://"), (signal.SIGINT, "migrating")],
    ids=["SIGTERM-running", "SIGINT-migrating"],
)
def test_a_bench_stopped_by_a_signal_stops_its_server_and_deletes_its_data(signum, when):
    """Stopped while it runs, or while it is still migrating its database: either way its server
    stops and its data directory goes."""
    # A short temporary directory of the bench's own, so its socket fits in its data directory and
    # its server is told from any other by the path on the command line.
    base = Path(tempfile.mkdtemp(prefix="bench-", dir="/tmp"))
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    process = subprocess.Popen(
        [sys.executable, "-c", BENCH],
        cwd=ROOT,
        env={**environment, "TMPDIR": str(base)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # "on an embedded PostgreSQL 18 …", "migrating …", then the URL
            if line.startswith(when):
                break
        else:
            pytest.fail(f"the bench did not start: {process.communicate(timeout=60)[1][-2000:]}")
        assert servers_of(str(base)), "the bench's server should be running"
        process.send_signal(signum)
        process.communicate(timeout=60)
        assert not servers_of(str(base))
        assert not list(base.glob("agent-schedules-bench-*"))  # its data directory is gone
    finally:
        if process.poll() is None:
            process.kill()
        for server in servers_of(str(base)):  # never leave one running, whatever the outcome
            server.kill()
        shutil.rmtree(base, ignore_errors=True)
