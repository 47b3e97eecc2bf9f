-- EXCEPT ALL: a row's multiplicity from its own multiplicities on each side.
-- setup
CREATE TABLE t (a int);
CREATE TABLE u (a int);
INSERT INTO t VALUES (1), (1), (2), (3);
INSERT INTO u VALUES (1), (3);
-- view
SELECT a FROM t EXCEPT ALL SELECT a FROM u
-- batch
INSERT INTO u VALUES (1), (2);
DELETE FROM u WHERE a = 3;
INSERT INTO t VALUES (4);
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: delta
Plan:
  Except All  // incremental (affected rows recomputed)
    Map (a := "t_a")  // incremental (row by row)
      Get materialize.public.t  // incremental (changes from the Delta change feed)
    Map (a := "u_a")  // incremental (row by row)
      Get materialize.public.u  // incremental (changes from the Delta change feed)
-- tick
incremental, mode delta
-- changes
-1 1
-1 2
+1 3
+1 4
