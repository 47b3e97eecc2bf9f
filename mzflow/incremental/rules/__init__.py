"""The incremental rules: one module per operator family, and the registry.

To make a new operator incremental, add its IR node (``plan/ir.py``), a module
here with a :class:`~mzflow.incremental.rules.base.Rule` for it, an entry in
``RULES``, and a golden fixture ``tests/golden/rules/<module>.sql``. A node
without a rule is refused with ``Unsupported`` naming it: nothing falls back to a
recompute silently (``tests/test_rules.py`` checks that every node has one).

``VARIANTS`` are the modes that maintain a whole plan from its root (state mode:
``reduce_state``); the plan asks them first (``claim``), the tick runs the one the
plan's mode names (``variant``).
"""

from __future__ import annotations

from mzflow.errors import Unsupported
from mzflow.incremental.modes import Mode
from mzflow.incremental.rules import (
    filter_map,
    flat_map,
    get,
    join,
    opaque,
    outer_join,
    reduce,
    reduce_state,
    setops,
    topk,
    union,
    window,
)
from mzflow.incremental.rules.base import Context, Rule, Variant
from mzflow.plan import ir

RULES: dict[type[ir.Node], Rule] = {
    rule.node: rule
    for rule in (get.RULE, filter_map.FILTER, filter_map.MAP, join.RULE, reduce.RULE,
                 topk.RULE, window.RULE, outer_join.RULE, union.RULE, setops.RULE,
                 flat_map.RULE, opaque.RULE)
}


def rule_for(node: ir.Node) -> Rule:
    rule = RULES.get(type(node))
    if rule is None:
        raise Unsupported(f"no incremental rule for the {type(node).__name__} operator",
                          hint="add one under mzflow/incremental/rules/")
    return rule


VARIANTS: dict[Mode, Variant] = {v.mode: v for v in (reduce_state.VARIANT,)}


def claim(root: ir.Node) -> tuple[Mode, Context] | None:
    """The mode of the variant that maintains ``root`` whole, and the context it gives
    the operators' rules (None: no variant does; the operators' rules decide)."""
    for variant in VARIANTS.values():
        ctx = variant.claim(root)
        if ctx is not None:
            return variant.mode, ctx
    return None


def variant(mode: Mode) -> Variant:
    return VARIANTS[mode]
