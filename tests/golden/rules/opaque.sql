-- Opaque: a correlated subquery with a non-equality correlation is not modelled;
-- it is recomputed whole, with its reason code.
-- setup
CREATE TABLE t (a int, b int);
CREATE TABLE u (c int);
INSERT INTO t VALUES (1, 10), (2, 20);
INSERT INTO u VALUES (5), (15), (25);
-- view
SELECT a, (SELECT count(*) FROM u WHERE u.c < t.b) AS n FROM t
-- batch
INSERT INTO u VALUES (1);
INSERT INTO t VALUES (3, 30);
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: recompute (R002: a subquery that could not be decorrelated into a join)
Tick mode: recompute
Plan:
  Opaque (a, n) := SELECT t.a AS a, (SELECT COUNT(*) AS _col_0 FROM mz_u2_v0 AS u WHERE u.c < t.b) AS n FROM mz_u1_v0 AS t  // recompute (R002: a subquery that could not be decorrelated into a join)
-- tick
recompute (R002: a subquery that could not be decorrelated into a join)
-- changes
-1 1 | 1
+1 1 | 2
-1 2 | 2
+1 2 | 3
+1 3 | 4
