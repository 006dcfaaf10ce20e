-- The functions stay at version 5, which a build of version 4 refuses at start-up by its version.
SELECT 1;
