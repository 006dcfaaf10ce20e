REVOKE ALL ON forge_eval_runs, forge_eval_cases, forge_eval_judgements FROM forge_tenant;
