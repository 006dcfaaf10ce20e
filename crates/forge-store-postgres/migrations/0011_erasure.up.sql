-- Erasure keeps an erased run's model calls for the tenant's totals and attributes them to the
-- nil run id, which no run has: the calls no longer reference forge_runs.
ALTER TABLE forge_model_calls DROP CONSTRAINT forge_model_calls_run_id_fkey;
