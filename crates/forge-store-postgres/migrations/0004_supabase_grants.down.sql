REVOKE ALL ON forge_model_calls FROM authenticated;
