REVOKE ALL ON forge_request_keys FROM forge_tenant;
