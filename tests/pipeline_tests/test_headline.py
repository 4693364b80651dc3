"""What `extend`'s summary says it shipped, plainly: a seed is named as the seed it is, an
equivalent winner points at the formula, a not-distinguishable one says how many documents would
settle it."""

from __future__ import annotations

from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import headline


def test_a_seed_is_named_as_the_seed_it_is() -> None:
    line = headline(Outcome(verdict="dominates", reference="yarn-cd", seed="yarn"))
    assert "the yarn seed (no searched candidate beat it)" in line
    assert "the searched winner" not in line


def test_equivalent_ships_the_formula() -> None:
    line = headline(Outcome(verdict="equivalent", reference="yarn-cd"))
    assert line.startswith("equivalent to yarn-cd:") and "ship yarn-cd" in line


def test_not_distinguishable_says_how_many_documents_would_settle_it() -> None:
    why = "16384: ppl 0.997x yarn-cd [0.992, 1.003]; to settle it: about 23 documents"
    line = headline(Outcome(verdict="not distinguishable", reference="yarn-cd", why=why))
    assert "(to settle it: about 23 documents)" in line and "yarn-cd is exported too" in line
