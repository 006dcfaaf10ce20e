-- Two indexes no statement uses, each written at every change of its rows. No plan chose
-- `forge_jobs_ready` since the claim moved to `forge_jobs_claimable` and `forge_jobs_lapsing`
-- (migration 20): the dead-job listing walks the primary key, and the other statements find a
-- job by id or run. Yet a job's state is its first column, so the claim and the completion of
-- every job (non-HOT updates) each added an entry, three a run. `forge_threads_tenant` is a
-- prefix of `forge_threads_newest` (migration 17), which serves every listing it could serve.
DROP INDEX forge_jobs_ready;
DROP INDEX forge_threads_tenant;
