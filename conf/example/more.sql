-- A second batch: one order changes, one is cancelled, one arrives.
UPDATE orders SET amount = 300.00 WHERE id = 100;
DELETE FROM orders WHERE id = 103;
INSERT INTO orders VALUES (104, 2, 15.00, '2026-11-04 12:00:00');
