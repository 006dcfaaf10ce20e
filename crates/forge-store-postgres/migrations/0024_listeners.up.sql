-- Who listens for run-event notifications. A step notifies `forge_run_events` in its own
-- transaction, and PostgreSQL serializes the commits of notifying transactions: each holds the
-- notification queue's lock through its WAL flush, so concurrent runs' step commits flushed one at
-- a time. Where no process listens (an application embedding Forge with no server beside it),
-- that cost bought nothing. A listener now keeps a row here while it listens (renewed before it
-- expires), and a step notifies only while an unexpired row exists. The table holds no tenant's
-- data: a random id and an expiry.
CREATE TABLE forge_listeners (
    id uuid PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
