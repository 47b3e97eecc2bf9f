CREATE CLUSTER analytics SIZE 'small';
CREATE TABLE orders (id bigint NOT NULL, customer text NOT NULL, amount numeric(12,2));
CREATE TABLE legacy (a int);
CREATE VIEW legacy_view AS SELECT a FROM legacy;
CREATE VIEW big AS SELECT id, customer, amount FROM orders WHERE amount > 100;
CREATE MATERIALIZED VIEW per_customer IN CLUSTER analytics AS
    SELECT customer, count(*) AS n FROM orders GROUP BY customer;
CREATE MATERIALIZED VIEW totals IN CLUSTER analytics AS
    SELECT customer, sum(amount) AS total FROM big GROUP BY customer;
CREATE INDEX orders_by_customer IN CLUSTER analytics ON orders (customer);
