"""The incremental rules: one module per operator family, and the registry.

To make a new operator incremental, add its IR node (``plan/ir.py``), a module
here with a :class:`~mzflow.incremental.rules.base.Rule` for it, an entry in
``RULES``, and a golden fixture ``tests/golden/rules/<module>.sql``. A node
without a rule is refused with ``Unsupported`` naming it: nothing falls back to a
recompute silently (``tests/test_rules.py`` checks that every node has one).
"""

from __future__ import annotations

from mzflow.errors import Unsupported
from mzflow.incremental.rules import (
    filter_map,
    flat_map,
    get,
    join,
    opaque,
    outer_join,
    reduce,
    setops,
    topk,
    union,
    window,
)
from mzflow.incremental.rules.base import Rule
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
