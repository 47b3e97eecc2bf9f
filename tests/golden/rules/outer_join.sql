-- LEFT equi-join: the affected join keys recomputed at both times.
-- setup
CREATE TABLE t (a int, b int);
CREATE TABLE u (a int, c text);
INSERT INTO t VALUES (1, 10), (2, 20), (NULL, 0);
INSERT INTO u VALUES (1, 'x'), (3, 'z');
-- view
SELECT t.a, t.b, u.c FROM t LEFT JOIN u ON t.a = u.a
-- batch
INSERT INTO u VALUES (2, 'w'), (1, 'y');
DELETE FROM u WHERE c = 'x';
INSERT INTO t VALUES (3, 30);
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a := "t_a", b := "t_b", c := "u_c")  // incremental (row by row)
    LeftJoin on=("t_a" = "u_a")  // incremental (affected join keys recomputed)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
      Get materialize.public.u  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
-1 1 | 10 | x
+1 1 | 10 | y
-1 2 | 20 | NULL
+1 2 | 20 | w
+1 3 | 30 | z
