DROP TABLE forge_model_calls;
