-- RLS mode acts as the application's own role; the dedicated tenant role is Supabase mode's
-- (0007_supabase_tenant_role). Kept so both modes share version numbers.
SELECT 1;
