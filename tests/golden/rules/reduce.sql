-- Reduce without kept state (COUNT DISTINCT does not accumulate): the affected groups
-- recomputed at both times.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (1, 20), (2, 5), (3, NULL);
-- view
SELECT a, count(DISTINCT b) AS n FROM t GROUP BY a
-- batch
INSERT INTO t VALUES (1, 30), (1, 10), (4, 1);
DELETE FROM t WHERE a = 2;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a, n := "agg0")  // incremental (row by row)
    Reduce group_by=["t_a"] aggregates=[COUNT(DISTINCT "t_b")]  // incremental (affected groups recomputed)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
-1 1 | 2
+1 1 | 3
-1 2 | 1
+1 4 | 1
