"""bot.mrkdwn: only ids shaped like Slack's own become mentions; everything else is text."""

from __future__ import annotations

import pytest

from bot import mrkdwn


@pytest.mark.parametrize(
    ("who", "shown"),
    [
        ("U0BOB", "<@U0BOB>"),
        ("W0GRID", "<@W0GRID>"),
        ("U1", "<@U1>"),
        ("S0REVIEWERS", "<!subteam^S0REVIEWERS>"),
        (" U0BOB ", "<@U0BOB>"),
        ("", "—"),
        ("webhook", "webhook"),
        ("Uabc", "Uabc"),  # lower case: not a Slack id
        ("U0BOB>", "U0BOB&gt;"),
        ("<!channel>", "&lt;!channel&gt;"),
        ("S0X|y", "S0X|y"),
        ("a ``` b", "a `\u200b`\u200b` b"),  # a name never opens a code block
    ],
)
def test_mention(who: str, shown: str) -> None:
    assert mrkdwn.mention(who) == shown


@pytest.mark.parametrize(
    ("who", "shown"),
    [
        ("U0BOB", "<@U0BOB>"),
        (" W0GRID ", "<@W0GRID>"),
        ("S0EVERYONE", "S0EVERYONE"),  # a requester or decider never notifies a whole group
        ("webhook", "webhook"),
        ("<!channel>", "&lt;!channel&gt;"),
        ("", "—"),
    ],
)
def test_person(who: str, shown: str) -> None:
    assert mrkdwn.person(who) == shown


def test_mentions_lists_the_first_ten_then_counts() -> None:
    ids = [f"U{n:02d}" for n in range(12)]
    assert mrkdwn.mentions(ids).endswith("<@U09> and 2 more")
    assert mrkdwn.mentions([]) == "—"


@pytest.mark.parametrize(
    ("channel", "shown"),
    [("C0OPS", "<#C0OPS>"), ("G0PRIVATE", "<#G0PRIVATE>"), ("D0DM", "<#D0DM>"), ("#ops", "#ops")],
)
def test_channel_link(channel: str, shown: str) -> None:
    assert mrkdwn.channel_link(channel) == shown


def test_date_is_shown_in_the_readers_time_zone_with_a_utc_fallback() -> None:
    assert mrkdwn.date(1700000000.5) == (
        "<!date^1700000000^{date_short_pretty} at {time}|2023-11-14 22:13 UTC>"
    )
    assert mrkdwn.date(None) == "—"
    assert mrkdwn.date(float("inf")) == "inf"


def test_inline_code() -> None:
    assert mrkdwn.inline_code("issue_refund") == "`issue_refund`"
    assert mrkdwn.inline_code("a<b") == "`a&lt;b`"
    assert mrkdwn.inline_code("") == "—"
    # A backtick would end the code early, and inline code cannot span lines: either would
    # let what follows render as formatting.
    assert mrkdwn.inline_code("a`b") == "`a\u02cbb`"
    assert (
        mrkdwn.inline_code("q3` *Approved by Finance* `")
        == "`q3\u02cb *Approved by Finance* \u02cb`"
    )
    assert (
        mrkdwn.inline_code("refund*\n:white_check_mark: *ok*")
        == "`refund* :white_check_mark: *ok*`"
    )
    # Other spaces are the value's own: an argument is shown as it is.
    assert mrkdwn.inline_code('{"path": "/srv/a   b.csv"}') == '`{"path": "/srv/a   b.csv"}`'
    assert mrkdwn.inline_code("a\u2028b\rc") == "`a b c`"  # every kind of line break
    assert mrkdwn.inline_code("x" * 10, limit=5) == "`xxxx…`"


def test_short_cuts_with_an_ellipsis_within_the_limit() -> None:
    cut = mrkdwn.short("&" * 100, 20)
    assert cut.endswith("…") and mrkdwn.units(cut) <= 20
    assert mrkdwn.units("😀") == 2
