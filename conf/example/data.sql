-- A first batch of data for the example pipeline.
INSERT INTO customers VALUES (1, 'Ada', 'EU'), (2, 'Grace', 'US'), (3, 'Edsger', 'EU');
INSERT INTO orders VALUES
    (100, 1, 250.00, '2026-11-01 09:00:00'),
    (101, 1, 40.50, '2026-11-02 10:30:00'),
    (102, 2, 120.00, '2026-11-02 11:00:00'),
    (103, 3, 99.99, '2026-11-03 08:15:00');
