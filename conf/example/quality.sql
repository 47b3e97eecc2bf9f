-- Expectations (conf/example/catalog.sql: positive_amount) are checked by Great
-- Expectations on every write. Order 110's amount is negative: it goes to the
-- quarantine table, with the expectation it failed, and 111 is committed.
INSERT INTO orders VALUES (110, 2, -15.00, '2026-11-04 12:00:00'),
                          (111, 3, 30.00, '2026-11-04 12:05:00');
SELECT id, amount, _mz_expectations, _mz_statement FROM orders_quarantine;
-- Fixed and replayed: validated again on the way in, then taken out of the quarantine.
INSERT INTO orders SELECT id, customer_id, abs(amount), ordered_at
    FROM orders_quarantine WHERE id = 110;
DELETE FROM orders_quarantine WHERE id = 110;
SELECT id, amount FROM orders WHERE id >= 110 ORDER BY id;
SELECT expectation, statement, rows_evaluated, unexpected, outcome FROM mz_expectation_results;
