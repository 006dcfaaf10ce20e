-- A retrieval source may belong to a principal (a private note's author): policies read it as
-- `resource.owner`, so ownership is not a label that some principal's id could equal.
ALTER TABLE forge_sources ADD COLUMN owner TEXT;
