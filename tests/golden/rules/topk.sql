-- TopK over a kept GROUP BY state: ranked over the groups' partials.
-- setup
CREATE TABLE t (a int, b int);
INSERT INTO t VALUES (1, 10), (2, 20), (3, 30), (4, 5);
-- view
SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, a LIMIT 2
-- batch
INSERT INTO t VALUES (4, 100), (1, 1);
DELETE FROM t WHERE a = 3;
-- explain
Maintained: materialize.public.v by materialize.public.v_primary_idx in cluster c
Strategy: incremental
Tick mode: state
Plan:
  TopK order_by=["s" DESC, "a"] limit=2  // incremental (top-k over the maintained groups)
    Map (a, s := "agg0")  // incremental (row by row)
      Reduce group_by=["t_a"] aggregates=[SUM("t_b")]  // incremental (accumulable: changes merged into the state by key)
        Get materialize.public.t  // incremental (changes from the Delta change feed)
-- tick
incremental, mode state
-- changes
-1 3 | 30
+1 4 | 105
