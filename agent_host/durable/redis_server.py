"""A real ``redis-server`` process owned by Python.

Used as the embedded default (REDIS_URL unset: the service runs one with its data in the
data dir and AOF on) and by the tests (``tests/support/redis_fixtures.py``). Everything is passed on
the command line, so no config file is needed. Servers still running when the interpreter
exits normally are stopped by an ``atexit`` hook; :meth:`RedisServer.kill` is a real SIGKILL
so tests can simulate a crash and check that :meth:`RedisServer.restart` replays the AOF.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Self
from urllib.parse import quote

import redis
import redis.exceptions

from agent_host.durable.data_dir import private_dir
from agent_host.durable.dir_lock import DirLock
from agent_host.errors import ConfigurationError, StoreError

__all__ = [
    "MEMORY_SETTINGS",
    "PID_FILE",
    "RedisServer",
    "find_executable",
    "free_port",
    "running_in",
    "share_url_of",
    "socket_path_usable",
    "unix_url",
]

AppendFsync = Literal["always", "everysec", "no"]
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
_LIVE: set[RedisServer] = set()
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux
PID_FILE = "redis-server.pid"
LOCK_FILE = "redis-server.lock"
# Memory per pending approval (bench `redis_bytes_per_pending`), both measured:
# - hash-max-listpack-value (Redis default 64): a run's and a request's hashes hold sealed
#   values of a few hundred bytes; above the limit Redis turns the whole hash into a
#   hashtable, 2-3x its size. Hashes here have < 40 fields, so the listpack stays cheap, and
#   a hash with a larger value (big tool arguments) still falls back to a hashtable.
# - stream-node-max-bytes (default 4096): every run has its own audit stream of a few
#   entries, and Redis 7.0 pre-allocates a whole node for a new stream (4 KB by default).
# Operators with their own REDIS_URL may set the same (docs/ARCHITECTURE.md, "Redis memory
# per pending approval").
MEMORY_SETTINGS: dict[str, str] = {
    "hash-max-listpack-value": "1024",
    "stream-node-max-bytes": "256",
}


def find_executable(name: str = "redis-server") -> str:
    """The path of ``name`` on PATH, or ConfigurationError saying how to get it."""
    path = shutil.which(name)
    if path is None:
        raise ConfigurationError(
            f"{name} is not on PATH: install it (`apt-get install redis-server`, "
            "`brew install redis`) or set REDIS_URL to an existing Redis server."
        )
    return path


def free_port(host: str = "127.0.0.1", *, bus: bool = False) -> int:
    """A TCP port free right now on ``host`` (and ``port + 10000`` too when ``bus``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if not bus:
            return port
        if port + 10000 <= 65535:
            with socket.socket(family, socket.SOCK_STREAM) as sock, contextlib.suppress(OSError):
                sock.bind((host, port + 10000))
                return port
    raise StoreError(f"found no free port pair (port, port+10000) on {host}: free some ports.")


def running_in(data_dir: Path) -> int | None:
    """The pid of a redis-server still running on `data_dir` (whoever started it, even a
    process killed since), or None. Read from the pid file it writes and removes at exit."""
    try:
        pid = int((Path(data_dir) / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # killed: the pid file outlived it
    except PermissionError:
        pass  # alive, another user's
    process = Path(f"/proc/{pid}")
    with contextlib.suppress(OSError):  # where /proc exists: not a reused pid
        if b"redis-server" not in (process / "cmdline").read_bytes():
            return None
    with contextlib.suppress(OSError):  # (another user's is not ours to read)
        if (process / "cwd").resolve(strict=True) != Path(data_dir).resolve():
            return None  # a redis-server, but on another dir (Redis works in its own)
    return pid


def share_url_of(pid: int) -> str | None:
    """A URL another process can reach a running redis-server at, from the title it gives
    its process (`redis-server unixsocket:/path/redis.sock`, or `redis-server
    127.0.0.1:6379` for one on TCP); None if unknown."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    if found := re.search(r"redis-server unixsocket:([^\x00]+)", title):  # (NUL-padded)
        return unix_url(Path(found.group(1)))
    if (found := re.search(r"redis-server \S*:(\d+)", title)) and int(found.group(1)):
        return f"redis://127.0.0.1:{found.group(1)}/0"
    return None


def unix_url(socket_path: Path) -> str:
    """The URL of a server on `socket_path` (quoted: a path may hold `#`, `?` or `%`)."""
    return f"unix://{quote(str(socket_path))}?db=0"


def socket_path_usable(path: Path) -> bool:
    """Whether a unix socket at `path` can be reached through a URL: short enough for a
    socket's address (108 bytes on Linux), and UTF-8 (a URL's path is read as UTF-8)."""
    raw = os.fsencode(path)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return len(raw) <= _MAX_SOCKET_PATH


def _socket_dir_in_temp() -> Path:
    """A new directory of the server's own in the temp dir, for a socket whose data dir's
    path is too long (or not UTF-8): made at once, 0700, under a name nobody could have
    taken first."""
    try:
        made = Path(tempfile.mkdtemp(prefix="csredis-"))
    except OSError as exc:
        raise ConfigurationError(
            f"no directory for the Redis server's socket could be made in the temp dir "
            f"({exc}): set TMPDIR to a directory countersign may write, or "
            "COUNTERSIGN_DATA_DIR to a shorter path"
        ) from None
    if not socket_path_usable(made / "redis.sock"):
        made.rmdir()
        raise ConfigurationError(
            f"the Redis server's socket fits neither in its data dir nor in the temp dir "
            f"{made.parent} (paths too long for a unix socket, or not UTF-8): set TMPDIR to "
            "a shorter directory, or COUNTERSIGN_DATA_DIR to a shorter path"
        )
    return made


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RedisServer:
    """One ``redis-server`` child process; start/stop/kill/restart, usable as a context manager."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        appendfsync: AppendFsync = "everysec",
        appendonly: bool = True,
        unix_socket: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.appendfsync: AppendFsync = appendfsync
        self.appendonly = appendonly
        self.extra_args = tuple(extra_args)
        self.log_path = self.data_dir / "redis-server.log"
        self.pid_path = self.data_dir / PID_FILE
        self._port = port
        self._fixed_port = port is not None
        self._proc: subprocess.Popen[bytes] | None = None
        self._data_dir_lock = DirLock(self.data_dir / LOCK_FILE)  # held from start to end
        self._socket_dir_made = False  # the socket's own directory in the temp dir exists
        # On a unix socket: in the data dir, or, where that path is too long for a socket
        # (or not UTF-8, as a URL's path must be), in a directory made for it in the temp
        # dir at the first start.
        self.socket_path: Path | None = None
        self._socket_in_temp = False
        if unix_socket:
            self.socket_path = self.data_dir / "redis.sock"
            if not socket_path_usable(self.socket_path):
                self.socket_path, self._socket_in_temp = None, True

    # -- state ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self.listens_on_a_socket:
            raise StoreError(f"this RedisServer listens on a unix socket, not a port: {self.url}")
        if self._port is None:
            raise StoreError("this RedisServer has no port yet: call start() first.")
        return self._port

    @property
    def listens_on_a_socket(self) -> bool:
        return self.socket_path is not None or self._socket_in_temp

    @property
    def url(self) -> str:
        if self.socket_path is not None:
            return unix_url(self.socket_path)
        if self._socket_in_temp:
            raise StoreError("this RedisServer has no socket yet: call start() first.")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://{host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"RedisServer({self.data_dir}, port={self._port}, {state})"

    # -- lifecycle -----------------------------------------------------------------------

    def command_line(self) -> list[str]:
        args = [find_executable(), "--daemonize", "no", "--dir", str(self.data_dir)]
        args += ["--save", "", "--appendonly", "yes" if self.appendonly else "no"]
        args += ["--appendfsync", self.appendfsync, "--loglevel", "notice"]
        args += ["--pidfile", str(self.pid_path)]  # says "in use" to other processes
        for name, value in MEMORY_SETTINGS.items():
            args += [f"--{name}", value]
        if self.socket_path is not None:  # (made 0700 at bind, under the umask of 077)
            args += ["--port", "0", "--unixsocket", str(self.socket_path)]
            args += ["--unixsocketperm", "700"]
        else:
            args += ["--port", str(self.port), "--bind", self.host]
            if _is_loopback(self.host):
                args += ["--protected-mode", "no"]
        return [*args, *self.extra_args]

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        """Launch the server and wait until it answers PING. No-op when already running.
        Waits up to `timeout` for the data dir (see `_hold_the_data_dir`), then up to
        `timeout` for the server to answer."""
        if self.running:
            return self
        if self._proc is not None:  # its child died on its own: reaped
            self._end(False, 0)
        self.refuse_a_second()  # (a server its pid file names: refused without a wait)
        private_dir(self.data_dir)
        find_executable()  # (before anything is made for a server that cannot start)
        with contextlib.ExitStack() as undo:  # what a start that failed leaves behind
            self._hold_the_data_dir(timeout)
            undo.callback(self._let_go_of_the_data_dir)
            if self.listens_on_a_socket:
                self._make_socket_dir()
                undo.callback(self._remove_socket_dir)
            undo.callback(self._end, False, 0)  # (a start interrupted: its child first)
            self._launch(timeout)
            undo.pop_all()  # kept while it runs
        return self

    def _hold_the_data_dir(self, timeout: float) -> None:
        """The data dir held by this server from now on. A running server its pid file
        names is refused at once; any other holder is waited for, up to `timeout`: a
        server starting at the same moment, until it writes its pid file, or the background
        save or AOF rewrite of one that was killed (Redis forks them, and they inherit the
        lock), until it ends."""
        deadline = time.monotonic() + timeout
        while not self._data_dir_lock.try_hold():
            self.refuse_a_second()
            if time.monotonic() >= deadline:
                lock = shlex.quote(str(self._data_dir_lock.path))
                raise ConfigurationError(
                    f"the embedded Redis's data dir {self.data_dir} is still held by another "
                    f"process after {timeout:g}s, and no pid file names it (a countersign "
                    "`serve`, `worker` or `demo` starting its Redis, or a Redis or its "
                    "background save left by one killed before its pid file was written): "
                    f"`fuser -v {lock}` names it; stop it if nothing should be there, or set "
                    "COUNTERSIGN_DATA_DIR to another directory"
                )
            time.sleep(0.05)

    def _let_go_of_the_data_dir(self) -> None:
        if self._proc is None:  # (an end interrupted: its child may still run)
            self._data_dir_lock.let_go()

    def _launch(self, timeout: float) -> None:
        on_a_port = not self.listens_on_a_socket
        for attempt in range(3):
            if on_a_port and (self._port is None or (not self._fixed_port and attempt)):
                self._port = free_port(self.host, bus="--cluster-enabled" in self.extra_args)
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(log_fd, "ab") as log:
                # umask 077: the AOF, RDB and pid files redis-server writes are 0600
                # The child holds the data dir's lock too: a server left by a process
                # killed before the server wrote its pid file still holds it.
                held = self._data_dir_lock.fd
                self._proc = subprocess.Popen(
                    self.command_line(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    umask=0o077,
                    pass_fds=() if held is None else (held,),
                )
            _LIVE.add(self)
            error = self._wait_ready(timeout, offset)
            if error is None:
                self._fixed_port = True  # restarts keep the URL
                return
            self._end(False, 0)  # (the data dir stays held for the next attempt)
            if self._fixed_port or not on_a_port or "Address already in use" not in error:
                break
        raise StoreError(
            f"redis-server did not start ({self.data_dir}, {self.url}); "
            f"fix the cause below and retry. Last lines of {self.log_path}:\n{error}"
        )

    def _make_socket_dir(self) -> None:
        """The socket's own directory in the temp dir: new at the first start, kept through
        a restart; made again after a stop only where nothing took its name meanwhile (stop
        removes it, and its name was in the process's title for anyone to see)."""
        if not self._socket_in_temp or self._socket_dir_made:
            return
        if self.socket_path is None:
            self.socket_path = _socket_dir_in_temp() / "redis.sock"
            self._socket_dir_made = True
            return
        try:
            os.mkdir(self.socket_path.parent, 0o700)
        except FileExistsError:
            raise ConfigurationError(
                f"{self.socket_path.parent}, the Redis server's socket directory, was made by "
                "something else while the server was stopped: remove it if nothing should "
                "be there, and start again"
            ) from None
        except OSError as exc:
            raise ConfigurationError(
                f"the Redis server's socket directory {self.socket_path.parent} could not be "
                f"made again ({exc.strerror}): set TMPDIR to a directory countersign may write"
            ) from None
        self._socket_dir_made = True

    def _remove_socket_dir(self) -> None:
        """The socket's own directory in the temp dir, gone with its server."""
        if self._socket_dir_made and self._proc is None and self.socket_path is not None:
            self._socket_dir_made = False
            with contextlib.suppress(OSError):
                self.socket_path.unlink(missing_ok=True)
                self.socket_path.parent.rmdir()

    def refuse_a_second(self) -> None:
        """ConfigurationError when a server runs on the data dir already (another
        countersign process's, or one a killed process left): a second server on the same
        AOF would keep its own data, the two processes would not see each other's runs, and
        the later would take the earlier's address."""
        pid = running_in(self.data_dir)
        if pid is None:
            return
        share = f"set REDIS_URL={url} to share it, " if (url := share_url_of(pid)) else ""
        raise ConfigurationError(
            f"the embedded Redis of {self.data_dir} is in use by another process "
            f"(redis-server pid {pid}, started by a running `countersign serve`, `worker` or "
            f"`demo`, or left by one that was killed): {share}stop it (kill {pid}) if nothing "
            "uses it, or set COUNTERSIGN_DATA_DIR to another directory"
        )

    def _wait_ready(self, timeout: float, log_offset: int) -> str | None:
        """None once this server answers PING (not another one at its address), else the
        log tail explaining why not."""
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        try:
            while time.monotonic() < deadline:
                if not self.running:
                    return self._log_tail(log_offset) or "(the process exited with no output)"
                # Its own pid (not another server's at the address), and done loading its
                # AOF (PING refuses while it loads, INFO does not).
                with contextlib.suppress(redis.exceptions.RedisError, OSError):
                    ours = client.info("server")["process_id"] == self._proc.pid  # type: ignore[union-attr]
                    if ours and client.ping():
                        return None
                time.sleep(0.02)
        finally:
            client.close()
        return (
            f"(no answer from this server, pid {self._proc.pid if self._proc else '?'}, at "
            f"{self.url} after {timeout:g}s)\n" + self._log_tail(log_offset)
        )

    def _log_tail(self, offset: int = 0, lines: int = 20) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _end(self, terminate: bool, timeout: float) -> None:
        """The child ended and waited for; forgotten only then (an end interrupted is
        ended again by the next stop, or at exit)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            if terminate:  # SIGTERM: redis fsyncs the AOF and exits cleanly
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
        proc.wait()
        self._proc = None
        _LIVE.discard(self)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Graceful shutdown (SIGTERM, then SIGKILL after ``timeout``); waits for the exit."""
        self._end(True, timeout)
        self._remove_socket_dir()
        self._let_go_of_the_data_dir()

    def kill(self) -> None:
        """SIGKILL, no shutdown at all: simulates a crash (only fsynced AOF data survives)."""
        self._end(False, 0)
        self._remove_socket_dir()
        self._let_go_of_the_data_dir()

    def restart(self, timeout: float = START_TIMEOUT) -> Self:
        """Stop if running, then start on the same port and dir (the AOF is replayed); the
        data dir stays held meanwhile."""
        self._end(True, STOP_TIMEOUT)
        return self.start(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stop_all() -> None:
    """No redis-server child outlives a normal interpreter exit."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(timeout=5.0)


atexit.register(_stop_all)
