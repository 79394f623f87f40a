"""How long a listener may work before it must answer Slack."""

from __future__ import annotations

__all__ = ["LISTENER_BUDGET"]

# Slack wants its answer within 3 s: after the replay guard (at most half a second:
# `SeenOnce`), everything one listener does (load, the reviewer-group lookup, the
# compare-and-set) shares this one budget, then the reviewer is told to look again.
LISTENER_BUDGET = 2.0  # leaves room for Bolt, the HTTP round trip and network jitter
