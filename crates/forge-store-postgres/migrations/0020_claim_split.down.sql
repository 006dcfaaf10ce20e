CREATE INDEX forge_jobs_open ON forge_jobs (id) WHERE state IN ('ready', 'claimed');
DROP INDEX forge_jobs_lapsing;
DROP INDEX forge_jobs_claimable;
