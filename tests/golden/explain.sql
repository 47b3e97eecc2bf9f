-- One statement per block; each block's EXPLAIN output goes to explain.out.
-- Regenerate with MZFLOW_UPDATE_GOLDEN=1 and review the diff.
CREATE CLUSTER work;
CREATE TABLE t (a int, b int);
CREATE TABLE u (a int, c int);
CREATE TABLE w (a int, d text);
CREATE MATERIALIZED VIEW mv IN CLUSTER work AS SELECT a, count(*) AS n, sum(b) AS s FROM t GROUP BY a;
----
EXPLAIN SELECT a, b * 2 AS b2 FROM t WHERE b > 1
----
EXPLAIN SELECT t.a, u.c, w.d FROM t JOIN u ON t.a = u.a JOIN w ON w.a = u.a
----
EXPLAIN SELECT t.a, u.c FROM t LEFT JOIN u ON t.a = u.a
----
EXPLAIN SELECT t.a, u.c FROM t FULL JOIN u ON t.a = u.a AND u.c > 0
----
EXPLAIN SELECT t.a, u.c FROM t LEFT JOIN u ON t.b < u.c
----
EXPLAIN SELECT a, count(*), count(DISTINCT b), sum(b), avg(b), min(b), max(b) FROM t GROUP BY a HAVING sum(b) > 0
----
EXPLAIN SELECT count(*) AS n, sum(b) AS s FROM t
----
EXPLAIN SELECT max(b) FROM t
----
EXPLAIN SELECT DISTINCT a FROM t
----
EXPLAIN SELECT a FROM t UNION ALL SELECT a FROM u
----
EXPLAIN SELECT a FROM t UNION SELECT a FROM u
----
EXPLAIN SELECT a FROM t EXCEPT SELECT a FROM u
----
EXPLAIN SELECT a FROM t INTERSECT ALL SELECT a FROM u
----
EXPLAIN SELECT a, b FROM t WHERE a IN (SELECT a FROM u WHERE c > 0)
----
EXPLAIN SELECT a, b FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a)
----
EXPLAIN SELECT a, b FROM t WHERE b > (SELECT avg(c) FROM u WHERE u.a = t.a)
----
EXPLAIN SELECT a, b FROM t WHERE b > (SELECT avg(c) FROM u)
----
EXPLAIN WITH x AS (SELECT a, sum(b) AS s FROM t GROUP BY a) SELECT x.a, x.s, u.c FROM x JOIN u ON x.a = u.a
----
EXPLAIN SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC LIMIT 3
----
EXPLAIN SELECT a, b FROM t ORDER BY b LIMIT 3
----
EXPLAIN SELECT a, b FROM (SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY b DESC) AS rn FROM t) AS x WHERE rn <= 2
----
EXPLAIN SELECT a, rank() OVER (ORDER BY b) FROM t
----
EXPLAIN SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b
----
EXPLAIN SELECT CASE WHEN b > 0 THEN 'pos' ELSE 'neg' END AS sign, CAST(a AS bigint) AS a8 FROM t
----
EXPLAIN SELECT mv.a, mv.n, u.c FROM mv JOIN u ON mv.a = u.a
----
EXPLAIN MATERIALIZED VIEW mv
----
EXPLAIN SELECT t.a, g FROM t, generate_series(1, t.b) AS g WHERE g > 1
----
EXPLAIN SELECT a, generate_series(1, 3) AS k FROM t
----
EXPLAIN SELECT t.a, g FROM t LEFT JOIN generate_series(1, t.b) AS g ON true
