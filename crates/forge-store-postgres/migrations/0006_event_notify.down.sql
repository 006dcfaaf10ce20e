DROP TRIGGER forge_run_events_notify ON forge_run_events;
DROP FUNCTION forge_notify_run_events();
