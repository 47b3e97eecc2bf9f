-- TopK without a partition or a kept state: recomputed whole (R005); its few rows are
-- collected before they are keyed, so Spark keeps its top-k plan.
-- setup
CREATE TABLE t (a int, p numeric(10,2), ts timestamp);
INSERT INTO t VALUES (1, 1.50, '2026-01-01 10:00:00'), (2, NULL, '2026-01-02 00:00:00'), (3, 9.99, NULL);
-- view
SELECT a, p, ts FROM t ORDER BY p DESC NULLS LAST, a LIMIT 2
-- batch
INSERT INTO t VALUES (4, 20.00, '2026-03-01 00:00:00');
DELETE FROM t WHERE a = 3;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: recompute (R005: ORDER BY … LIMIT without a partition is recomputed whole)
Tick mode: recompute
Plan:
  TopK order_by=["p" DESC NULLS LAST, "a"] limit=2  // recompute (R005: ORDER BY … LIMIT without a partition is recomputed whole)
    Map (a := "t_a", p := "t_p", ts := "t_ts")  // incremental (row by row)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
recompute (R005: ORDER BY … LIMIT without a partition is recomputed whole)
-- changes
-1 3 | 9.99 | NULL
+1 4 | 20.00 | 2026-03-01 00:00:00
