-- A projection (ClickHouse's): per-customer order sums kept beside each data file of
-- `orders` by every write. The SELECT below names only the table; EXPLAIN says which
-- projection answers it, and how many parts were stored or projected on the fly.
EXPLAIN SELECT customer_id, count(*), sum(amount) FROM orders GROUP BY customer_id;
SELECT customer_id, count(*), sum(amount) FROM orders GROUP BY customer_id ORDER BY 1;
SELECT * FROM mz_projection_history;
