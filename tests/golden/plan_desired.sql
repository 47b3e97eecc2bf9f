-- The desired catalog: every object, as it should be.
CREATE CLUSTER analytics SIZE 'small';
CREATE CLUSTER staging SIZE 'xsmall';
-- Non-breaking: a column added at the end.
CREATE TABLE orders (id bigint NOT NULL, customer text NOT NULL, amount numeric(12,2),
                     note text);
-- Breaking: amount is gone, and totals reads it.
CREATE VIEW big AS SELECT id, customer FROM orders WHERE amount > 200;
-- Non-breaking: the same columns, another definition.
CREATE MATERIALIZED VIEW per_customer IN CLUSTER analytics AS
    SELECT customer, count(*) AS n FROM orders WHERE amount > 0 GROUP BY customer;
CREATE MATERIALIZED VIEW totals IN CLUSTER analytics AS
    SELECT customer, count(*) AS orders FROM big GROUP BY customer;
CREATE INDEX orders_by_customer IN CLUSTER analytics ON orders (customer);
CREATE MATERIALIZED VIEW counts IN CLUSTER staging AS SELECT count(*) AS n FROM orders;
-- Refused: there is no such column.
CREATE VIEW broken AS SELECT nope FROM orders;
-- Not catalog DDL: ignored. (legacy and legacy_view are not here: both drop.)
INSERT INTO orders VALUES (9, 'z', 1);
