-- Who holds each claim: a restarted process on this host takes over the claims of a holder
-- that is no longer running (forge_core::holder) instead of waiting out their lease.
ALTER TABLE forge_jobs ADD COLUMN holder TEXT;
