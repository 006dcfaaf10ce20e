-- The functions stay at version 7, which a build of version 6 refuses at start-up by its version.
SELECT 1;
