
-- Supabase mode: tenant transactions run as `authenticated`.
GRANT SELECT, INSERT, UPDATE ON forge_model_calls TO authenticated;
