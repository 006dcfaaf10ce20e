// GraphiQL, bundled with Forge (no CDN): pointed at the server that served it, over HTTP and
// `graphql-transport-ws`, with the web client's token when this browser is signed in.

import { createGraphiQLFetcher } from "@graphiql/toolkit";
import { GraphiQL } from "graphiql";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";

import "graphiql/style.css";
import "./graphiql.css";

const url = new URL("/graphql", location.href).href;
// The web client's session (shared by the tabs of this origin), if there is one.
const token = localStorage.getItem("forge.token");
const headers = { Authorization: `Bearer ${token ?? "<a token from `forge token`>"}` };
const fetcher = createGraphiQLFetcher({
  url,
  subscriptionUrl: url.replace(/^http/, "ws"),
  // The session's token on every request (the schema's introspection included); headers typed
  // in the editor still apply on top.
  headers: token ? { Authorization: `Bearer ${token}` } : undefined,
  wsConnectionParams: token ? { authorization: `Bearer ${token}` } : undefined,
});

const root = document.getElementById("graphiql");
if (root) {
  createRoot(root).render(
    <StrictMode>
      <GraphiQL fetcher={fetcher} defaultHeaders={JSON.stringify(headers, null, 2)} />
    </StrictMode>,
  );
}
