//! An imported tool: a [`Tool`] whose calls go to its MCP server.

use std::sync::Arc;

use async_trait::async_trait;
use forge_core::ports::tool::{Tool, ToolContext, ToolError, ToolSpec};
use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};

use crate::server::ServerHandle;

/// The `_meta` key carrying a call's idempotency key to the server.
pub const IDEMPOTENCY_META_KEY: &str = "dev.forge/idempotency-key";
/// The `_meta` key carrying the run's id.
pub const RUN_META_KEY: &str = "dev.forge/run-id";
/// The `_meta` key carrying the run's lease token, a fencing token
/// ([`ToolContext::lease_token`]): a server can refuse a call with a smaller one than it has
/// seen for the run.
pub const LEASE_TOKEN_META_KEY: &str = "dev.forge/lease-token";

/// A pinned tool of one server.
pub struct McpTool {
    spec: ToolSpec,
    remote: String,
    server: Arc<ServerHandle>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .finish()
    }
}

impl McpTool {
    /// The tool `remote` of `server`, offered as `spec`.
    pub fn new(spec: ToolSpec, remote: String, server: Arc<ServerHandle>) -> Self {
        Self {
            spec,
            remote,
            server,
        }
    }

    /// The server's name for the tool.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }
}

/// Binary payloads leave the result (the model cannot read base64 usefully, and it would fill
/// the output limit); their size stays.
fn strip_data(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for key in ["data", "blob"] {
                let len = map.get(key).and_then(|v| v.as_str()).map(str::len);
                if let Some(len) = len {
                    map.remove(key);
                    map.insert("omitted_base64_chars".into(), len.into());
                }
            }
            map.values_mut().for_each(strip_data);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_data),
        _ => {}
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn available(&self) -> bool {
        self.server.verified(&self.remote)
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        let server = self.server.name();
        // A change the server announced is listed and checked before any call goes out; while
        // the listing is pending, calls wait for it, and fail closed if it does not come.
        if !self
            .server
            .settled(self.server.config().call_timeout())
            .await
        {
            return Err(ToolError::Unavailable(format!(
                "MCP server {server} announced a change to its tools and has not listed them \
                 since; the call was not sent"
            )));
        }
        // Checked again here: the server may have changed the tool since it was offered or
        // approved; a changed tool does not run.
        if !self.server.verified(&self.remote) {
            return Err(ToolError::Unavailable(format!(
                "tool {} of MCP server {server} changed since it was pinned and is disabled until an operator pins it again",
                self.remote
            )));
        }
        let peer = self.server.peer().ok_or_else(|| {
            ToolError::Unavailable(format!(
                "MCP server {server} is not connected; it is being restarted"
            ))
        })?;
        let arguments = match input {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => serde_json::Map::new(),
            _ => {
                return Err(ToolError::InvalidInput(
                    "the input must be an object".into(),
                ));
            }
        };
        let mut meta = serde_json::Map::new();
        meta.insert(
            IDEMPOTENCY_META_KEY.into(),
            ctx.idempotency_key.to_string().into(),
        );
        meta.insert(RUN_META_KEY.into(), ctx.run_id.to_string().into());
        meta.insert(LEASE_TOKEN_META_KEY.into(), ctx.lease_token.into());
        let mut params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        let timeout = self.server.config().call_timeout();
        // Dropping the call (timeout, or the run cancelled) sends `notifications/cancelled`.
        let result = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => {
                return Err(ToolError::Unavailable(format!(
                    "MCP server {server} did not answer within {} s; the call was cancelled",
                    timeout.as_secs()
                )));
            }
            Ok(Err(e)) => {
                return Err(ToolError::Unavailable(format!(
                    "MCP server {server} failed the call: {e}"
                )));
            }
            Ok(Ok(r)) => r,
        };
        let mut content = serde_json::to_value(&result.content)
            .map_err(|e| ToolError::Failed(format!("unreadable result: {e}")))?;
        strip_data(&mut content);
        if result.is_error == Some(true) {
            let text: Vec<&str> = content
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("text").and_then(|t| t.as_str()))
                .collect();
            return Err(ToolError::Failed(if text.is_empty() {
                "the tool reported an error".into()
            } else {
                text.join("\n")
            }));
        }
        let mut out = serde_json::Map::new();
        out.insert("content".into(), content);
        if let Some(structured) = result.structured_content {
            out.insert("structured_content".into(), structured);
        }
        Ok(serde_json::Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn binary_payloads_are_replaced_by_their_size() {
        let mut v = json!([{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]);
        strip_data(&mut v);
        assert_eq!(
            v,
            json!([{"type": "text", "text": "hi"}, {"type": "image", "omitted_base64_chars": 4, "mimeType": "image/png"}])
        );
    }
}
