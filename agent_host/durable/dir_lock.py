"""One holder of a directory at a time, across processes: an `flock` on a file in it.

The embedded Redis's data dir is held by the `RedisServer` that runs on it, from its start
to its end: two servers started at the same moment would both find none running, share
the AOF, and the later would take the earlier's socket. Its redis-server child holds it too
(it inherits the lock's file descriptor), so a server outlives the process that started it
still holding its data dir; so do the background saves Redis forks, until they end.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agent_host.errors import ConfigurationError

__all__ = ["DirLock"]


class DirLock:
    def __init__(self, path: Path) -> None:
        self.path = path  # the lock file
        self._fd: int | None = None

    def try_hold(self) -> bool:
        """Held by this one from now on (again, while it still holds it, a no-op): True;
        False while another holds it. ConfigurationError when the lock file cannot be
        opened or locked at all."""
        if self._fd is not None:
            if _same_file(self._fd, self.path):
                return True
            self.let_go()  # (the file was removed or replaced meanwhile: it holds nothing)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigurationError(
                f"{self.path} could not be opened ({exc.strerror}): make it countersign's "
                "user's, or set COUNTERSIGN_DATA_DIR to a directory of its own"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise ConfigurationError(
                f"{self.path} could not be locked ({exc.strerror}): set COUNTERSIGN_DATA_DIR "
                "to a directory on a local filesystem"
            ) from None
        self._fd = fd
        return True

    @property
    def fd(self) -> int | None:
        """The lock's file descriptor while held: a child process given it holds the lock
        with this one, and after it, until the child ends."""
        return self._fd

    def let_go(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # (and with it the lock, unless a child still holds it)


def _same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is open on the file now at `path`."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (found.st_dev, found.st_ino)
