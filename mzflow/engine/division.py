"""PostgreSQL's numeric division, decided once for both engines.

The binder gives a numeric quotient (``/`` with a numeric result, ``avg`` of integers
or numerics) its result scale (``catalog/exprtypes.py``: at least ``DIV_SCALE``
places). Both engines then compute the exact quotient at that scale, rounded half away
from zero as PostgreSQL rounds: Spark by casting the operands so that its own decimal
division lands on that scale, then its HALF_UP cast (``spark/pg_sql.py``); the
in-process engine in Python integers (``arrow_arith.quotient``). For the two to agree,
they must agree on which quotients they compute that way and on how many digits a
numerator may have before it is a numeric field overflow: that is this module.
"""

from __future__ import annotations

from dataclasses import dataclass

DIGITS = 38  # a decimal128's, the widest decimal of Spark and of Arrow's kernels
# Spark never types a decimal quotient below 6 places (DecimalPrecision's minimum
# adjusted scale): a smaller scale cannot be had from its division.
MIN_SCALE = 6


@dataclass(frozen=True)
class Quotient:
    """How an exact numeric quotient is computed: ``decimal(DIGITS, scale)``, from a
    numerator of at most ``numerator_digits`` digits at that scale (more is 22003)."""

    scale: int
    denominator_scale: int

    @property
    def numerator_digits(self) -> int:
        # Spark types decimal(DIGITS - s2, t) / decimal(DIGITS, s2) as exactly
        # decimal(DIGITS, t): scale max(6, t + DIGITS + 1), cut to keep DIGITS - t
        # integer digits.
        return DIGITS - self.denominator_scale


def exact(scale: int, denominator_scale: int = 0) -> Quotient | None:
    """The exact quotient at ``scale`` places of a denominator with
    ``denominator_scale`` places (0: an integer, a count), or None where neither engine
    computes it exactly yet (Spark keeps its own decimal division there, the in-process
    engine refuses): a scale below Spark's least, or so large that the numerator would
    keep no integer digit."""
    if scale < MIN_SCALE or scale + denominator_scale > DIGITS - 1:
        return None
    return Quotient(scale, denominator_scale)
