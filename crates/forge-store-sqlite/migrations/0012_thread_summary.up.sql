-- A thread's summary (forge_core::thread::ThreadSummary as JSON): what its oldest messages are sent
-- to the model as once compacted. The messages stay in forge_messages.
ALTER TABLE forge_threads ADD COLUMN summary TEXT;
