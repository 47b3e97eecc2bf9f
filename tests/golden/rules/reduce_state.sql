-- Reduce with kept state: COUNT, SUM and AVG merge into partials; MIN after a
-- retraction recomputes its affected groups.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (1, 20), (2, 5), (3, NULL);
-- view
SELECT a, count(*) AS n, sum(b) AS s, min(b) AS lo, count(b) AS nb FROM t GROUP BY a
-- batch
INSERT INTO t VALUES (1, 30), (4, 1), (3, 7);
DELETE FROM t WHERE b = 10;
DELETE FROM t WHERE a = 2;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: state
Plan:
  Map (a, n := "agg0", s := "agg1", lo := "agg2", nb := "agg3")  // incremental (row by row)
    Reduce group_by=["t_a"] aggregates=[COUNT(*), SUM("t_b"), MIN("t_b"), COUNT("t_b")]  // incremental (accumulable: changes merged into the state by key; MIN/MAX merged for append-only batches, else their affected groups recomputed)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode state
-- changes
-1 1 | 2 | 30 | 10 | 2
+1 1 | 2 | 50 | 20 | 2
-1 2 | 1 | 5 | 5 | 1
-1 3 | 1 | NULL | NULL | 0
+1 3 | 2 | 7 | 7 | 1
+1 4 | 1 | 1 | 1 | 1
