DROP TABLE forge_eval_judgements;
DROP TABLE forge_eval_cases;
DROP TABLE forge_eval_runs;
