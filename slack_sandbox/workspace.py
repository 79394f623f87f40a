"""The local Slack sandbox's state, as plain dataclasses (a local stand-in, not Slack).

One :class:`Workspace` holds the team, the bot, users, channels, user groups, messages,
ephemeral messages, modal views, App Home tabs and live ``response_url`` hooks. It is saved
as one JSON file in a directory (written to a temporary file, then ``os.replace``-d into
place) after every change, and loaded again on start, so a restarted stand-in keeps its
messages and views
(see :mod:`slack_sandbox.persistence`; the default seed is in :mod:`slack_sandbox.seed`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JsonDict = dict[str, Any]


@dataclass
class Team:
    id: str
    name: str
    domain: str


@dataclass
class BotUser:
    user_id: str
    bot_id: str
    app_id: str
    name: str


@dataclass
class User:
    id: str
    name: str
    real_name: str
    role: str  # a label for a page's user switcher; not a Slack field
    is_admin: bool = False
    email: str = ""
    tz: str = "Europe/London"


@dataclass
class Channel:
    id: str
    name: str
    created: int
    members: list[str]
    is_private: bool = False
    is_general: bool = False
    is_im: bool = False
    im_user: str | None = None
    topic: str = ""
    purpose: str = ""
    is_archived: bool = False  # posts answer is_archived, as Slack's do


@dataclass
class UserGroup:
    id: str
    handle: str
    name: str
    users: list[str]
    description: str = ""


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[JsonDict] = field(default_factory=list)
    thread_ts: str | None = None
    user: str | None = None
    bot_id: str | None = None
    reply_count: int = 0
    reply_users: list[str] = field(default_factory=list)
    latest_reply: str | None = None
    edited: dict[str, str] | None = None  # Slack's shape: {"user": ..., "ts": ...}


@dataclass
class EphemeralMessage:
    channel: str
    user: str
    ts: str
    text: str
    blocks: list[JsonDict] = field(default_factory=list)
    thread_ts: str | None = None


@dataclass
class View:
    id: str
    user: str
    hash: str
    view: JsonDict  # the full view object, shaped as views.open returns it
    closed: bool = False
    errors: dict[str, str] = field(default_factory=dict)  # last response_action=errors


@dataclass
class ResponseHook:
    """What a ``response_url`` the stand-in handed out points back to."""

    token: str
    channel: str
    user: str
    message_ts: str | None
    is_ephemeral: bool
    created_at: float
    uses: int = 0


@dataclass
class Workspace:
    team: Team
    bot: BotUser
    users: list[User]
    channels: list[Channel]
    usergroups: list[UserGroup]
    messages: list[Message] = field(default_factory=list)
    ephemerals: list[EphemeralMessage] = field(default_factory=list)
    views: list[View] = field(default_factory=list)
    response_hooks: list[ResponseHook] = field(default_factory=list)
    homes: list[View] = field(default_factory=list)  # each user's App Home tab (views.publish)
    last_ts_us: int = 0
    directory: Path | None = None  # where `persist` saves it (None: nowhere, in memory)
    # How a change is saved there (`persistence.open_workspace` sets it); None: not saved.
    persist: Callable[[Workspace], None] | None = field(default=None, repr=False, compare=False)

    # ----------------------------------------------------------------- persistence

    def save(self) -> None:
        """Save the state (`persist`, set by `persistence.open_workspace`); a no-op in memory."""
        if self.persist is not None:
            self.persist(self)

    # ----------------------------------------------------------------- ids and lookups

    def next_ts(self) -> str:
        """A Slack-style ``"1700000000.000100"`` timestamp, strictly increasing (even across
        restarts: the last one is persisted)."""
        now_us = int(time.time() * 1_000_000)
        ts_us = max(now_us, self.last_ts_us + 1)
        self.last_ts_us = ts_us
        return f"{ts_us // 1_000_000}.{ts_us % 1_000_000:06d}"

    def user(self, user_id: str) -> User | None:
        return next((u for u in self.users if u.id == user_id), None)

    def channel(self, channel_id: str) -> Channel | None:
        return next((c for c in self.channels if c.id == channel_id), None)

    def usergroup(self, group_id: str) -> UserGroup | None:
        return next((g for g in self.usergroups if g.id == group_id), None)

    def seen_by_bot(self, channel: Channel | None) -> Channel | None:
        """`channel` as the bot sees it: a private channel it is not in is hidden, as if it
        did not exist (Slack answers ``channel_not_found``, not ``not_in_channel``)."""
        if channel is not None and channel.is_private and self.bot.user_id not in channel.members:
            return None
        return channel

    def resolve_channel(self, ref: str) -> Channel | None:
        """A channel by id, by name (``general`` or ``#general``), or a user id's DM channel,
        as ``chat.postMessage`` accepts them."""
        found = self.channel(ref)
        if found is not None:
            return found
        name = ref.removeprefix("#")
        found = next((c for c in self.channels if c.name == name and not c.is_im), None)
        if found is not None:
            return found
        if self.user(ref) is not None:
            return self.im_channel(ref)
        return None

    def im_channel(self, user_id: str) -> Channel:
        """The bot's direct-message channel with a user, created on first use."""
        existing = next((c for c in self.channels if c.is_im and c.im_user == user_id), None)
        if existing is not None:
            return existing
        channel = Channel(
            id="D" + user_id.removeprefix("U"),
            name=user_id,
            created=int(time.time()),
            members=[user_id, self.bot.user_id],
            is_private=True,
            is_im=True,
            im_user=user_id,
        )
        self.channels.append(channel)
        return channel

    def message(self, channel_id: str, ts: str) -> Message | None:
        return next((m for m in self.messages if m.channel == channel_id and m.ts == ts), None)

    def channel_messages(self, channel_id: str) -> list[Message]:
        return [m for m in self.messages if m.channel == channel_id]

    def thread_replies(self, channel_id: str, thread_ts: str) -> list[Message]:
        return [
            m
            for m in self.messages
            if m.channel == channel_id and m.thread_ts == thread_ts and m.ts != thread_ts
        ]

    def find_ephemeral(
        self, channel_id: str, ts: str, user_id: str | None = None
    ) -> EphemeralMessage | None:
        return next(
            (
                e
                for e in self.ephemerals
                if e.channel == channel_id and e.ts == ts and user_id in (None, e.user)
            ),
            None,
        )

    def ephemerals_for(self, user_id: str, channel_id: str | None = None) -> list[EphemeralMessage]:
        return [e for e in self.ephemerals if e.user == user_id and channel_id in (None, e.channel)]

    def view(self, view_id: str) -> View | None:
        return next((v for v in self.views if v.id == view_id), None)

    def view_by_external_id(self, external_id: str) -> View | None:
        return next(
            (v for v in self.views if external_id and v.view.get("external_id") == external_id),
            None,
        )

    def home(self, user_id: str) -> View | None:
        """The App Home tab the app last published for ``user_id``."""
        return next((v for v in self.homes if v.user == user_id), None)

    def hook(self, token: str) -> ResponseHook | None:
        return next((h for h in self.response_hooks if h.token == token), None)

    # ----------------------------------------------------------------- changes

    def add_message(
        self,
        channel_id: str,
        text: str,
        blocks: list[JsonDict],
        *,
        thread_ts: str | None = None,
        user: str | None = None,
        bot_id: str | None = None,
    ) -> Message:
        """Store a new channel message (a thread reply when ``thread_ts`` is set)."""
        if thread_ts is not None:
            parent = self.message(channel_id, thread_ts)
            if parent is not None and parent.thread_ts not in (None, parent.ts):
                # a reply to a reply lands in the parent's thread, as in Slack
                thread_ts = parent.thread_ts
                parent = self.message(channel_id, thread_ts) if thread_ts else None
        else:
            parent = None
        message = Message(
            channel=channel_id,
            ts=self.next_ts(),
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
            user=user,
            bot_id=bot_id,
        )
        if parent is not None:
            if parent.thread_ts is None:
                parent.thread_ts = parent.ts
            parent.reply_count += 1
            author = user or bot_id or ""
            if author and author not in parent.reply_users:
                parent.reply_users.append(author)
            parent.latest_reply = message.ts
        self.messages.append(message)
        return message

    def add_bot_message(
        self, channel_id: str, text: str, blocks: list[JsonDict], thread_ts: str | None = None
    ) -> Message:
        return self.add_message(
            channel_id,
            text,
            blocks,
            thread_ts=thread_ts,
            user=self.bot.user_id,
            bot_id=self.bot.bot_id,
        )

    def add_ephemeral(
        self,
        channel_id: str,
        user_id: str,
        text: str,
        blocks: list[JsonDict],
        thread_ts: str | None = None,
    ) -> EphemeralMessage:
        ephemeral = EphemeralMessage(
            channel=channel_id,
            user=user_id,
            ts=self.next_ts(),
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
        )
        self.ephemerals.append(ephemeral)
        return ephemeral

    def delete_message(self, channel_id: str, ts: str) -> bool:
        before = len(self.messages)
        self.messages = [m for m in self.messages if not (m.channel == channel_id and m.ts == ts)]
        return len(self.messages) != before

    def delete_ephemeral(self, channel_id: str, ts: str) -> bool:
        before = len(self.ephemerals)
        self.ephemerals = [
            e for e in self.ephemerals if not (e.channel == channel_id and e.ts == ts)
        ]
        return len(self.ephemerals) != before
