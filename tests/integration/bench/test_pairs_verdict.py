"""`bench.pairs` says which tree was cheaper by the pairs it measured, not by chance of
order: the mean difference relative to the other tree, and the pairs lower."""

from __future__ import annotations

from bench.pairs import verdict


def test_the_verdict_gives_the_mean_change_and_the_pairs_lower() -> None:
    said = verdict([(9.0, 10.0), (11.0, 10.0), (9.5, 10.0), (9.5, 10.0)])
    assert said == "this tree 9.75 ms/cycle against 10.00 ms (-2.5%), lower in 3 of 4 pairs"


def test_a_dearer_tree_is_said_to_be_dearer() -> None:
    assert "(+10.0%), lower in 0 of 2 pairs" in verdict([(11.0, 10.0), (11.0, 10.0)])
