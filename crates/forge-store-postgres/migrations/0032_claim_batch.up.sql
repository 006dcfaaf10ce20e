-- The system functions' version 6 (sql/system_functions.sql): `forge_sys_claim_many` claims up to
-- a number of jobs in one statement, each as `forge_sys_claim` would after the ones before it. No
-- table changes. In RLS mode an administrator provisions the functions (`forge migrate
-- --admin-url`, `provision_system`); Supabase mode's migration provisions them itself after this
-- file.
SELECT 1;
