-- The system functions' version 7 (sql/system_functions.sql): `forge_sys_complete`, which the step
-- that ends a run calls, is one conditional update instead of a call of `forge_sys_holds` and an
-- update. No table changes. In RLS mode an administrator provisions the functions (`forge migrate
-- --admin-url`, `provision_system`); Supabase mode's migration provisions them itself after this
-- file.
SELECT 1;
