-- NOT VALID: calls of erased runs stay, attributed to the nil run id.
ALTER TABLE forge_model_calls ADD CONSTRAINT forge_model_calls_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES forge_runs (id) NOT VALID;
