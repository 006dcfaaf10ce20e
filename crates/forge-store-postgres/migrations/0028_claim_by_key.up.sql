-- The system functions' version 5 (sql/system_functions.sql): the claim plans with sequential
-- scans off, so its agent filter looks each candidate's run up by key however few runs the table
-- held when a connection planned it. No table changes. In RLS mode an administrator provisions
-- the functions (`forge migrate --admin-url`, `provision_system`); Supabase mode's migration
-- provisions them itself after this file.
SELECT 1;
