-- The claim walks open jobs (ready, or claimed with a lapsed lease) in id order and stops at the
-- first its filter admits. Without this index SQLite looked up every ready job through two
-- indexes, tested the agent filter on each and sorted them: a claim cost in proportion to the
-- backlog (about 1,000 queued runs made every claim test 1,000 rows).
CREATE INDEX forge_jobs_open ON forge_jobs (id) WHERE state IN ('ready', 'claimed');
