-- A statement that refuses a transaction: inserting into forge_refuse aborts the statement with
-- the error 'forge: refused' (RAISE is only allowed in a trigger), which stops a multi-statement
-- batch before its COMMIT. A step commit is sent as one batch whose first write refuses it unless
-- the run is as the step expects.
CREATE VIEW forge_refuse (reason) AS SELECT NULL WHERE 0;
CREATE TRIGGER forge_refuse INSTEAD OF INSERT ON forge_refuse
BEGIN
    SELECT RAISE(ABORT, 'forge: refused');
END;
