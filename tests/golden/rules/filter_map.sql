-- Filter and Map: row by row.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (2, 0), (3, 30);
-- view
SELECT a, b * 2 AS b2, a + b AS s FROM t WHERE b > 1
-- batch
INSERT INTO t VALUES (4, 40), (5, -1);
UPDATE t SET b = 0 WHERE a = 1;
UPDATE t SET b = 5 WHERE a = 2;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a := "t_a", b2 := "t_b" * 2, s := "t_a" + "t_b")  // incremental (row by row)
    Filter "t_b" > 1  // incremental (row by row)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
-1 1 | 20 | 11
+1 2 | 10 | 7
+1 4 | 80 | 44
