-- A load generator feeding a maintained view. AUCTION's snapshot (organizations,
-- users, accounts) is committed now; each tick of the analytics cluster then adds one
-- step (an auction and its bids) before it maintains the view, exactly once per step.
CREATE SOURCE auction IN CLUSTER analytics FROM LOAD GENERATOR AUCTION FOR ALL TABLES;
CREATE MATERIALIZED VIEW bids_per_org IN CLUSTER analytics AS
    SELECT u.org_id, count(*) AS bids, sum(b.amount) AS total
    FROM bids b JOIN users u ON u.id = b.buyer
    GROUP BY u.org_id;
SHOW SOURCES;
