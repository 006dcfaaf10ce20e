DROP TABLE forge_interactions;
