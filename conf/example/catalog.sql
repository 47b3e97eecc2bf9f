-- The example pipeline: an orders feed, maintained per-customer totals and a
-- daily export. Run it with `make demo`, or `mzflow sql -f conf/example/catalog.sql`.

-- Clusters become Airflow pools; SIZE sets the pool's slots and Spark resources.
CREATE CLUSTER ingest SIZE 'xsmall';
CREATE CLUSTER analytics SIZE 'small';

CREATE TABLE customers (id bigint NOT NULL, name text NOT NULL, region text);
CREATE TABLE orders (
    id bigint NOT NULL,
    customer_id bigint NOT NULL,
    amount numeric(12, 2) NOT NULL,
    ordered_at timestamp NOT NULL
);

-- A projection is kept with the table by every write, and answers the queries it can
-- without being named (conf/example/projection.sql).
ALTER TABLE orders ADD PROJECTION per_customer
    (SELECT customer_id, count(*), sum(amount) GROUP BY customer_id);

-- An expectation, checked by Great Expectations on every write: a row that fails it
-- is kept aside in orders_quarantine, queryable, to be fixed and replayed
-- (conf/example/quality.sql).
ALTER TABLE orders ADD CONSTRAINT positive_amount EXPECT (amount > 0)
    ON VIOLATION QUARANTINE;

-- A plain view is only a name for a query.
CREATE VIEW big_orders AS SELECT id, customer_id, amount FROM orders WHERE amount > 100;

-- A materialized view is maintained incrementally by its cluster.
CREATE MATERIALIZED VIEW customer_totals IN CLUSTER analytics AS
    SELECT c.id, c.name, count(*) AS orders, sum(o.amount) AS total
    FROM customers AS c JOIN orders AS o ON o.customer_id = c.id
    GROUP BY c.id, c.name;

CREATE INDEX customer_totals_by_name IN CLUSTER analytics ON customer_totals (name);

CREATE SINK daily_totals IN CLUSTER analytics FROM customer_totals
    INTO PARQUET 'exports/customer_totals'
    WITH (ENVELOPE = UPSERT, KEY = (id), SCHEDULE = '@daily', TIMEZONE = 'Europe/Berlin');
