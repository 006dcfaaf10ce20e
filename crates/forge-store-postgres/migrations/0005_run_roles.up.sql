-- The roles of the principal who started a run: workers authorize its tool calls with them.
ALTER TABLE forge_runs ADD COLUMN role_ids jsonb NOT NULL DEFAULT '[]';
