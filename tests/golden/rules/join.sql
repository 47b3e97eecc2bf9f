-- Inner join: the delta-join rule, the other input read by the changed keys.
-- setup
CREATE TABLE t (a int, b int);
CREATE TABLE u (a int, c text);
INSERT INTO t VALUES (1, 10), (2, 20), (3, 30);
INSERT INTO u VALUES (1, 'x'), (1, 'y'), (3, 'z');
-- view
SELECT t.a, t.b, u.c FROM t JOIN u ON t.a = u.a
-- batch
INSERT INTO t VALUES (1, 11), (4, 40);
INSERT INTO u VALUES (2, 'w'), (4, 'v');
DELETE FROM u WHERE c = 'z';
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Map (a := "t_a", b := "t_b", c := "u_c")  // incremental (row by row)
    Join on=("t_a" = "u_a")  // incremental (delta join, other inputs looked up by the changed keys)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
      Get materialize.public.u  // incremental (changes from the Delta change feed)
Join lookups in arrangements of cluster c:
  - materialize.public.t (a): arrangement u1.a
  - materialize.public.u (a): arrangement u2.a
-- tick
incremental, mode delta
-- changes
+1 1 | 11 | x
+1 1 | 11 | y
+1 2 | 20 | w
-1 3 | 30 | z
+1 4 | 40 | v
