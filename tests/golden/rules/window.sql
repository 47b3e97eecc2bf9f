-- Window functions with a common PARTITION BY: the affected partitions recomputed.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (1, 20), (2, 5), (2, 6);
-- view
SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY b) AS rn FROM t
-- batch
INSERT INTO t VALUES (1, 15), (3, 1);
DELETE FROM t WHERE b = 5;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a := "t_a", b := "t_b", rn := "window0")  // incremental (row by row)
    Window partition_by=[t_a] (ROW_NUMBER() OVER (PARTITION BY "t_a" ORDER BY "t_b"))  // incremental (affected partitions recomputed)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
+1 1 | 15 | 2
-1 1 | 20 | 2
+1 1 | 20 | 3
-1 2 | 5 | 1
+1 2 | 6 | 1
-1 2 | 6 | 2
+1 3 | 1 | 1
