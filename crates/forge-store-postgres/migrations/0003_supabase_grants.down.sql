REVOKE ALL ON forge_interactions FROM authenticated;
