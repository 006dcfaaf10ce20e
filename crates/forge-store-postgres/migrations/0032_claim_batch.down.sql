-- The functions stay at version 6, which a build of version 5 refuses at start-up by its version.
SELECT 1;
