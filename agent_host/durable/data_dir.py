"""The data directory and the key file are private to the user countersign runs as.

The data dir holds the embedded Redis's AOF (every checkpoint, request and decision) and,
when COUNTERSIGN_ENCRYPTION_KEYS is unset, the key file: neither is anyone else's to read.
The dir is made 0700 (an existing one is tightened, since files made by older versions
inside it are then out of reach too); a key file others can read is refused, because the
key may already have leaked and only its owner can tell.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from agent_host.errors import ConfigurationError

__all__ = ["check_private_file", "private_dir"]

log = logging.getLogger(__name__)

_OTHERS = 0o077  # any permission for group or others


def private_dir(path: Path) -> Path:
    """`path`, created 0700 if missing, tightened to 0700 if group or others may enter it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no such parent, no permission
        raise ConfigurationError(
            f"data directory {path} cannot be made ({exc.strerror}): set COUNTERSIGN_DATA_DIR "
            "to a directory countersign may create and write"
        ) from None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & _OTHERS:
        try:
            os.chmod(path, mode & ~_OTHERS)
        except OSError as exc:
            raise ConfigurationError(
                f"data directory {path} is open to other users (mode {mode:03o}) and cannot "
                f"be tightened ({exc.strerror}): run `chmod 700 {path}` as its owner, or set "
                "COUNTERSIGN_DATA_DIR to a directory of your own"
            ) from None
        log.warning(
            "data directory %s was open to other users (mode %03o); it is now %03o",
            path,
            mode,
            mode & ~_OTHERS,
        )
    return path


def check_private_file(path: Path, what: str) -> None:
    """ConfigurationError when group or others have any permission on `path`."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & _OTHERS:
        raise ConfigurationError(
            f"{what} {path} can be read by other users (mode {mode:03o}): run "
            f"`chmod 600 {path}` (and replace the key if someone else may have read it)"
        )
