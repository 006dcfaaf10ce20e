-- A claim took the oldest open job over one index of ready and claimed jobs, so with 50 runs in
-- flight it stepped past 50 held claims to find the one ready job. Now it asks two narrow
-- indexes: the claims whose lease lapsed, by expiry (usually none: one entry read), then the
-- ready jobs in id order.
CREATE INDEX forge_jobs_claimable ON forge_jobs (id) WHERE state = 'ready';
CREATE INDEX forge_jobs_lapsing ON forge_jobs (expires_at) WHERE state = 'claimed';
DROP INDEX forge_jobs_open;
