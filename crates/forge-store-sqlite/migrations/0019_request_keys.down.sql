DROP TABLE forge_request_keys;
