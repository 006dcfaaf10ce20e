DROP INDEX forge_runs_in_flight;
