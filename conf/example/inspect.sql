-- What `make demo` prints after loading the example catalog.
SHOW CLUSTERS;
SELECT id, name, size, pool_slots FROM mz_clusters ORDER BY id;
SHOW OBJECTS;
SHOW INDEXES IN CLUSTER analytics;
SHOW SINKS;
SHOW CREATE MATERIALIZED VIEW customer_totals;
SELECT o.name, o.type, c.name AS cluster
FROM mz_objects AS o
LEFT JOIN mz_indexes AS i ON i.id = o.id
LEFT JOIN mz_clusters AS c ON c.id = i.cluster_id
ORDER BY o.name;
