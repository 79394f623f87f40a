"""A modal's error under an input is short plain text: one too long ends at a whole
sentence (or word), never in the middle of one, and keeps what to do."""

from __future__ import annotations

from bot.listeners.replies import FORM_ERROR_MAX, FULL, UNAVAILABLE, UNCONFIRMED, form_error


def test_a_short_error_is_shown_whole_without_bold_marks() -> None:
    assert form_error("*Nothing* was changed.") == "Nothing was changed."
    assert form_error(UNAVAILABLE) == UNAVAILABLE  # fits, with what to do
    assert "click again in a moment" in UNAVAILABLE
    assert form_error(FULL) == FULL  # a full Redis: who must act, and that nothing changed


def test_a_long_error_ends_at_its_last_whole_sentence_that_fits() -> None:
    shown = form_error(UNCONFIRMED)
    assert len(UNCONFIRMED) > FORM_ERROR_MAX >= len(shown)
    assert shown == (
        ":warning: countersign could not confirm your decision in time. If the message still "
        "shows its buttons, click again."
    )


def test_a_long_error_with_no_sentence_end_ends_at_a_word() -> None:
    shown = form_error("word " * 60)
    assert len(shown) <= FORM_ERROR_MAX
    assert shown.endswith("word…")
