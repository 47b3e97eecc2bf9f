-- A landing folder: each file loads exactly once, a bad file fails alone (its
-- neighbours still load), and mz_copy_history says what happened to every file.
-- Run from the repository's root (`make demo` does): the path is relative to it.
COPY orders FROM 'conf/example/landing/orders'
    WITH (FORMAT csv, HEADER true, PATTERN '*.csv');
-- Nothing new: nothing loads again (the bad file is tried again, and fails again).
COPY orders FROM 'conf/example/landing/orders'
    WITH (FORMAT csv, HEADER true, PATTERN '*.csv');
SELECT path, rows, status, error
    FROM mz_internal.mz_copy_history ORDER BY path;
