DROP TRIGGER forge_refuse;
DROP VIEW forge_refuse;
