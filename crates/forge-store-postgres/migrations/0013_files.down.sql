DROP TABLE forge_files;
