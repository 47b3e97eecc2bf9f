"""Lowering a bound query into the relational IR (mzflow/plan/lower.py): the shape of
the tree for each construct, and the reason code of what it leaves opaque.

The catalog is built through ``mzflow.connect`` DDL in a temporary SQLite home; DDL
never starts Spark, and lowering reads only the catalog, so these tests start nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlglot import exp

import mzflow
from mzflow.catalog.model import Snapshot
from mzflow.plan import ir
from mzflow.plan.lower import R_CONSTRUCT, R_SUBQUERY, lower
from mzflow.plan.query import plan
from mzflow.sql.parse import parse_query

T_COLUMNS = ("t_a", "t_b", "t_c", "t__mz_rowid")
U_COLUMNS = ("u_a", "u_d", "u__mz_rowid")


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snapshot]:
    home: Path = tmp_path_factory.mktemp("lower")
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE t (a int, b int, c text); CREATE TABLE u (a int, d int);"
                     "CREATE VIEW big AS SELECT a, b FROM t WHERE b > 10;"
                     "CREATE TABLE w (k int); CREATE VIEW w0 AS SELECT * FROM w;"
                     "ALTER TABLE w ADD COLUMN extra text")
        yield conn.store.snapshot()


def lowered(snap: Snapshot, sql: str) -> ir.Node:
    return lower(snap, plan(snap, parse_query(sql)).query)


def sqls(exprs: tuple[exp.Expr, ...]) -> tuple[str, ...]:
    return tuple(ir.sql(e) for e in exprs)


def test_filter_and_map_over_a_get(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a + b AS s, c FROM t WHERE b > 1")
    assert isinstance(root, ir.Map)
    assert root.columns == ("s", "c")
    assert sqls(root.exprs) == ('"t_a" + "t_b"', '"t_c"')
    filt = root.input
    assert isinstance(filt, ir.Filter) and sqls(filt.predicates) == ('"t_b" > 1',)
    get = filt.input
    assert isinstance(get, ir.Get)
    assert (get.item_id, get.name, get.ref) == ("u1", "materialize.public.t", "mz_u1_v0")
    # Every stored column, the hidden row id included, under the relation's alias.
    assert get.stored == ("a", "b", "c", "_mz_rowid") and get.columns == T_COLUMNS


def test_inner_join_takes_where_conjuncts_and_records_equalities(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT t.a, u.d FROM t JOIN u ON t.a = u.a WHERE t.b = 1")
    join = root.inputs[0]
    assert isinstance(join, ir.Join)
    assert [p.columns for p in join.parts] == [T_COLUMNS, U_COLUMNS]
    assert join.columns == T_COLUMNS + U_COLUMNS
    assert sqls(join.predicates) == ('"t_a" = "u_a"', '"t_b" = 1')
    assert join.equalities == (((0, "t_a"), (1, "u_a")),)


def test_comma_join_of_three_with_aliases_is_one_join(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT x.a FROM t, u AS x, t AS y WHERE t.a = x.a AND x.d = y.b")
    join = root.inputs[0]
    assert isinstance(join, ir.Join) and len(join.parts) == 3
    assert [g.name for g in root.gets()] == ["materialize.public.t", "materialize.public.u",
                                              "materialize.public.t"]
    assert join.parts[2].columns == ("y_a", "y_b", "y_c", "y__mz_rowid")
    assert join.equalities == (((0, "t_a"), (1, "x_a")), ((1, "x_d"), (2, "y_b")))


def test_join_using_is_an_equality(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a FROM t JOIN u USING (a)")
    # An inner join's merged column is its left side's (PostgreSQL's rule); a FULL
    # join's is COALESCE of both (tests/test_join_precedence.py).
    assert isinstance(root, ir.Map) and sqls(root.exprs) == ('"t_a"',)
    assert isinstance(root.input, ir.Join)
    assert root.input.equalities == (((0, "t_a"), (1, "u_a")),)


def test_left_join_keys_and_a_left_side_filter_pushed_below_it(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT t.a, u.d FROM t LEFT JOIN u ON t.a = u.a WHERE t.b > 0")
    outer = root.inputs[0]
    assert isinstance(outer, ir.OuterJoin)
    assert (outer.kind, outer.keys, ir.sql(outer.on)) == ("left", (("t_a", "u_a"),),
                                                          '"t_a" = "u_a"')
    # The filter on the preserved side runs before the join, not above it.
    assert isinstance(outer.left, ir.Filter) and sqls(outer.left.predicates) == (
        '"t_b" > 0',)
    assert isinstance(outer.right, ir.Get)


def test_right_join_is_a_left_join_with_sides_swapped(snap: Snapshot) -> None:
    outer = lowered(snap, "SELECT t.a, u.d FROM t RIGHT JOIN u ON t.a = u.a").inputs[0]
    assert isinstance(outer, ir.OuterJoin) and outer.kind == "left"
    assert outer.left.columns == U_COLUMNS and outer.right.columns == T_COLUMNS
    assert outer.keys == (("u_a", "t_a"),)
    assert outer.columns == U_COLUMNS + T_COLUMNS


def test_full_join_keeps_its_residual_condition(snap: Snapshot) -> None:
    outer = lowered(
        snap, "SELECT t.a, u.d FROM t FULL JOIN u ON u.a = t.a AND t.b < u.d").inputs[0]
    assert isinstance(outer, ir.OuterJoin) and outer.kind == "full"
    # Key pairs are (left column, right column) whichever way the equality is written.
    assert outer.keys == (("t_a", "u_a"),)
    assert ir.sql(outer.on) == '"u_a" = "t_a" AND "t_b" < "u_d"'


def test_outer_join_without_equality_has_no_keys(snap: Snapshot) -> None:
    outer = lowered(snap, "SELECT t.a, u.d FROM t LEFT JOIN u ON t.b < u.d").inputs[0]
    assert isinstance(outer, ir.OuterJoin) and outer.keys == ()


def test_left_join_whose_right_side_where_rejects_null_is_inner(snap: Snapshot) -> None:
    join = lowered(snap, "SELECT t.a, u.d FROM t LEFT JOIN u ON t.a = u.a WHERE u.d > 0"
                   ).inputs[0]
    assert isinstance(join, ir.Join)
    assert sqls(join.predicates) == ('"t_a" = "u_a"', '"u_d" > 0')


def test_in_subquery_is_decorrelated_into_a_join_with_a_distinct_side(snap: Snapshot) -> None:
    join = lowered(snap, "SELECT a FROM t WHERE a IN (SELECT a FROM u)").inputs[0]
    assert isinstance(join, ir.Join) and len(join.equalities) == 1
    distinct = [n for n in join.walk() if isinstance(n, ir.Reduce)]
    assert len(distinct) == 1 and distinct[0].aggs == ()


def test_group_by_reduce_with_shared_aggregates_and_having(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a, count(*), sum(b), sum(b) + 1 FROM t GROUP BY a "
                         "HAVING count(*) > 1")
    assert isinstance(root, ir.Map)
    assert sqls(root.exprs) == ('"a"', '"agg0"', '"agg1"', '"agg1" + 1')
    having = root.input
    assert isinstance(having, ir.Filter) and sqls(having.predicates) == ('"agg0" > 1',)
    reduce = having.input
    assert isinstance(reduce, ir.Reduce)
    # sum(b) appears twice in the query and once in the Reduce.
    assert reduce.columns == ("a", "agg0", "agg1")
    assert sqls(reduce.keys) == ('"t_a"',)
    assert sqls(reduce.aggs) == ("COUNT(*)", 'SUM("t_b")')


def test_aggregate_without_group_by_is_a_reduce_without_keys(snap: Snapshot) -> None:
    reduce = lowered(snap, "SELECT count(*) FROM t").inputs[0]
    assert isinstance(reduce, ir.Reduce) and reduce.keys == () and reduce.columns == ("agg0",)


def test_select_distinct_is_a_reduce_over_all_columns(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT DISTINCT a, c FROM t")
    assert isinstance(root, ir.Reduce) and root.aggs == ()
    assert sqls(root.keys) == ('"a"', '"c"')
    assert isinstance(root.input, ir.Map)


def test_order_by_limit_is_a_top_k_with_hidden_sort_columns(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a, b FROM t ORDER BY b DESC, c LIMIT 3 OFFSET 1")
    # The hidden key (c) is projected away again above the TopK.
    assert isinstance(root, ir.Map) and root.columns == ("a", "b")
    top = root.input
    assert isinstance(top, ir.TopK)
    assert (top.limit, top.offset, top.group) == (3, 1, ())
    assert sqls(top.order) == ('"b" DESC', '"_order0"')
    assert isinstance(top.input, ir.Map) and top.input.columns == ("a", "b", "_order0")


def test_order_by_ordinal_and_order_without_limit(snap: Snapshot) -> None:
    top = lowered(snap, "SELECT a, b FROM t ORDER BY 2 LIMIT 5")
    assert isinstance(top, ir.TopK) and sqls(top.order) == ('"b"',) and top.limit == 5
    # ORDER BY alone does not change a view's contents.
    assert not any(isinstance(n, ir.TopK)
                   for n in lowered(snap, "SELECT a FROM t ORDER BY a").walk())


def test_windows_share_their_common_partition(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a, row_number() OVER (PARTITION BY a ORDER BY b) AS rn, "
                         "sum(b) OVER (PARTITION BY a, c) FROM t")
    assert isinstance(root, ir.Map) and root.columns == ("a", "rn", "_col_2")
    assert sqls(root.exprs) == ('"t_a"', '"window0"', '"window1"')
    win = root.input
    assert isinstance(win, ir.Window)
    assert win.partition == ("t_a",)
    assert win.columns == T_COLUMNS + ("window0", "window1")
    assert sqls(win.exprs)[0] == 'ROW_NUMBER() OVER (PARTITION BY "t_a" ORDER BY "t_b")'


def test_union_all_flattens_and_union_adds_a_distinct(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a FROM t UNION ALL SELECT a FROM u UNION ALL SELECT b FROM t")
    assert isinstance(root, ir.Union) and len(root.parts) == 3 and root.columns == ("a",)
    distinct = lowered(snap, "SELECT a FROM t UNION SELECT a FROM u")
    assert isinstance(distinct, ir.Reduce) and distinct.aggs == ()
    assert isinstance(distinct.input, ir.Union) and len(distinct.input.parts) == 2


@pytest.mark.parametrize(("op", "kind", "all_"), [
    ("EXCEPT", "except", False), ("EXCEPT ALL", "except", True),
    ("INTERSECT", "intersect", False), ("INTERSECT ALL", "intersect", True),
])
def test_except_and_intersect_are_set_ops(snap: Snapshot, op: str, kind: str, all_: bool
                                          ) -> None:
    root = lowered(snap, f"SELECT a FROM t {op} SELECT a FROM u")
    assert isinstance(root, ir.SetOp) and (root.kind, root.all) == (kind, all_)
    assert [g.name for g in root.gets()] == ["materialize.public.t", "materialize.public.u"]


def test_views_are_inlined_down_to_their_tables(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT a FROM big WHERE a < 5")
    assert [g.name for g in root.gets()] == ["materialize.public.t"]
    filters = [sqls(n.predicates) for n in root.walk() if isinstance(n, ir.Filter)]
    assert filters == [('"big_a" < 5',), ('"t_b" > 10',)]


def test_a_view_reads_the_table_version_it_was_created_on(snap: Snapshot) -> None:
    (old,) = lowered(snap, "SELECT * FROM w0").gets()
    (new,) = lowered(snap, "SELECT * FROM w").gets()
    assert (old.ref, old.stored) == ("mz_u4_v0", ("k", "_mz_rowid"))
    assert (new.ref, new.stored) == ("mz_u4_v1", ("k", "extra", "_mz_rowid"))


@pytest.mark.parametrize(("sql", "reason", "reads"), [
    ("SELECT DISTINCT ON (a) a, b FROM t", R_CONSTRUCT, ["t"]),
    ("SELECT a, b, sum(b) FROM t GROUP BY ROLLUP (a, b)", R_CONSTRUCT, ["t"]),
    ("SELECT 1", R_CONSTRUCT, []),
    # A correlated subquery without an equality: sqlglot cannot decorrelate it.
    ("SELECT a, (SELECT max(d) FROM u WHERE u.a > t.a) FROM t", R_SUBQUERY, ["t", "u"]),
])
def test_what_the_ir_does_not_model_is_opaque_with_a_reason(
        snap: Snapshot, sql: str, reason: str, reads: list[str]) -> None:
    root = lowered(snap, sql)
    assert isinstance(root, ir.Opaque)
    assert root.reason == reason
    # It still names the tables it reads, so a tick knows what to recompute it from.
    assert [g.name.rsplit(".", 1)[1] for g in root.reads] == reads
