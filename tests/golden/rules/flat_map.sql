-- FlatMap (generate_series): a series over a column is maintained row by row, each
-- change row expanded to its series with its diff; a series of constants is a
-- constant relation, joined like any input and never changed.
-- setup
CREATE TABLE t (k int, n int);
INSERT INTO t VALUES (1, 2), (2, 3), (3, NULL);
-- view
SELECT t.k, g, h FROM t, generate_series(1, t.n) AS g, generate_series(10, 11) AS h WHERE g <> 2
-- batch
INSERT INTO t VALUES (4, 1), (5, 0);
DELETE FROM t WHERE k = 1;
UPDATE t SET n = 4 WHERE k = 2;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (k := "t_k", g := "g_g", h := "h_h")  // incremental (row by row)
    Join on=("g_g" <> 2)  // incremental (delta join, other inputs looked up by the changed keys)
      FlatMap GENERATE_SERIES(1, "t_n") AS (g_g)  // incremental (row by row: each change row expanded to its series)
        Get materialize.public.t  // incremental (changes from the Delta change feed)
      FlatMap GENERATE_SERIES(10, 11) AS (h_h)  // incremental (constant arguments: a constant relation, never changes)
-- tick
incremental, mode delta
-- changes
-1 1 | 1 | 10
-1 1 | 1 | 11
+1 2 | 4 | 10
+1 2 | 4 | 11
+1 4 | 1 | 10
+1 4 | 1 | 11
