-- A server asks how many of a tenant's runs are queued or running before each start (its limit
-- on runs in flight). Over the whole table that count reads every run the tenant ever had; this
-- index holds only the runs in flight, and a run leaves it when it ends.
CREATE INDEX forge_runs_in_flight ON forge_runs (tenant_id) WHERE status IN ('queued', 'running');
