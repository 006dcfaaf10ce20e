DROP TABLE forge_listeners;
