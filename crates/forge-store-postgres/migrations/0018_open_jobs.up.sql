-- The claim takes the oldest open job (ready, or claimed with a lapsed lease) in id order. Over
-- the whole table that order walks every finished job first, so a claim's cost grew with the
-- queue's history (3.6 ms at 20,000 finished jobs); over this index it walks open jobs only.
CREATE INDEX forge_jobs_open ON forge_jobs (id) WHERE state IN ('ready', 'claimed');
