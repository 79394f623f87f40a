"""Saving and loading the local Slack sandbox's workspace as one JSON file.

The file is written to a temporary file in the same directory and then ``os.replace``-d
over the old one, so a crash mid-write never leaves a half-written workspace behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from slack_sandbox.seed import seed_workspace
from slack_sandbox.workspace import (
    BotUser,
    Channel,
    EphemeralMessage,
    Message,
    ResponseHook,
    Team,
    User,
    UserGroup,
    View,
    Workspace,
)

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
STATE_FILE = "slack_workspace.json"
FORMAT_VERSION = 1


def workspace_to_dict(ws: Workspace) -> JsonDict:
    return {
        "format_version": FORMAT_VERSION,
        "team": dataclasses.asdict(ws.team),
        "bot": dataclasses.asdict(ws.bot),
        "users": [dataclasses.asdict(u) for u in ws.users],
        "channels": [dataclasses.asdict(c) for c in ws.channels],
        "usergroups": [dataclasses.asdict(g) for g in ws.usergroups],
        "messages": [dataclasses.asdict(m) for m in ws.messages],
        "ephemerals": [dataclasses.asdict(e) for e in ws.ephemerals],
        "views": [dataclasses.asdict(v) for v in ws.views],
        "response_hooks": [dataclasses.asdict(h) for h in ws.response_hooks],
        "homes": [dataclasses.asdict(v) for v in ws.homes],
        "last_ts_us": ws.last_ts_us,
    }


def workspace_from_dict(data: JsonDict) -> Workspace:
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported format_version {version!r}")
    return Workspace(
        team=Team(**data["team"]),
        bot=BotUser(**data["bot"]),
        users=[User(**u) for u in data["users"]],
        channels=[Channel(**c) for c in data["channels"]],
        usergroups=[UserGroup(**g) for g in data["usergroups"]],
        messages=[Message(**m) for m in data.get("messages", [])],
        ephemerals=[EphemeralMessage(**e) for e in data.get("ephemerals", [])],
        views=[View(**v) for v in data.get("views", [])],
        response_hooks=[ResponseHook(**h) for h in data.get("response_hooks", [])],
        homes=[View(**v) for v in data.get("homes", [])],
        last_ts_us=int(data.get("last_ts_us", 0)),
    )


def save_workspace(ws: Workspace, directory: Path) -> None:
    payload = json.dumps(workspace_to_dict(ws), indent=1, sort_keys=True)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=".slack_ws.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
        os.replace(tmp_name, directory / STATE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def open_workspace(directory: Path | str) -> Workspace:
    """The workspace saved in `directory`, or a new one from the default seed saved there;
    either way, saved there after each change."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / STATE_FILE
    if not path.exists():
        ws = _saved_in(seed_workspace(), directory)
        ws.save()
        logger.info("seeded a new sandbox workspace at %s", path)
        return ws
    try:
        ws = workspace_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"sandbox workspace file {path} is unreadable ({exc}); "
            "delete it to start again from the default seed"
        ) from exc
    logger.info("loaded sandbox workspace from %s (%d messages)", path, len(ws.messages))
    return _saved_in(ws, directory)


def _saved_in(ws: Workspace, directory: Path) -> Workspace:
    ws.directory = directory
    ws.persist = functools.partial(save_workspace, directory=directory)
    return ws
