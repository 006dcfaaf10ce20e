DROP INDEX forge_jobs_open;
