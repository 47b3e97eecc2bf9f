-- UNION ALL: linear, its changed inputs' changes together.
-- setup
CREATE TABLE t (a int, b int);
CREATE TABLE u (a int, c int);
INSERT INTO t VALUES (1, 10), (2, 20);
INSERT INTO u VALUES (1, 10);
-- view
SELECT a, b FROM t UNION ALL SELECT a, c FROM u
-- batch
INSERT INTO u VALUES (2, 20), (3, 30);
DELETE FROM t WHERE a = 1;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Union  // incremental (row by row)
    Map (a := "t_a", b := "t_b")  // incremental (row by row)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
    Map (a := "u_a", c := "u_c")  // incremental (row by row)
      Get materialize.public.u  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
-1 1 | 10
+1 2 | 20
+1 3 | 30
