-- Get: a base table's changes come from its Delta change feed.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (1, 10), (2, NULL);
-- view
SELECT a, b FROM t
-- batch
INSERT INTO t VALUES (3, 30), (1, 10);
DELETE FROM t WHERE b IS NULL;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a := "t_a", b := "t_b")  // incremental (row by row)
    Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
+1 1 | 10
-1 2 | NULL
+1 3 | 30
