-- What `make demo` prints after loading the example catalog.
SHOW CLUSTERS;
SELECT id, name, size, pool_slots FROM mz_clusters ORDER BY id;
SHOW OBJECTS;
SHOW INDEXES IN CLUSTER analytics;
SHOW SINKS;
SHOW PROJECTIONS;
SHOW CONSTRAINTS;
EXPLAIN MATERIALIZED VIEW customer_totals;
SELECT * FROM mz_frontiers;
