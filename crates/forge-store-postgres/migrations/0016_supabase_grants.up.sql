-- Supabase mode: tenant transactions act as `forge_tenant`; signed-in users get nothing.
GRANT SELECT, INSERT, UPDATE, DELETE ON forge_eval_runs, forge_eval_cases TO forge_tenant;
GRANT SELECT, INSERT ON forge_eval_judgements TO forge_tenant;
REVOKE ALL ON forge_eval_runs, forge_eval_cases, forge_eval_judgements FROM authenticated, anon;
