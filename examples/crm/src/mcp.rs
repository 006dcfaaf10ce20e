//! The CRM's MCP server: the CRM's records as Model Context Protocol tools, over stdio
//! (newline-delimited JSON-RPC 2.0), for Forge to import (`forge-mcp`) like any other server.
//!
//! It implements what Forge's client uses: `initialize`, `notifications/initialized`, `ping`,
//! `tools/list` and `tools/call`. Every call's result carries `structuredContent`; a failure is a
//! result with `isError` (the model reads why), a malformed request a JSON-RPC error.
//! `update_opportunity` applies once per `_meta["dev.forge/idempotency-key"]`, the key Forge sends
//! with every call: a retried or replayed call changes nothing twice.
//!
//! Who may call what is not decided here: Forge's policies see each call (with its input) before
//! it is sent, so a rep's `list_opportunities` for someone else's pipeline never arrives.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::db::{CrmDb, STAGES};

/// The `_meta` key Forge sends each call's idempotency key under.
pub const IDEMPOTENCY_META_KEY: &str = "dev.forge/idempotency-key";

/// The tools, as `tools/list` describes them.
pub fn tools() -> Value {
    json!([
        {
            "name": "list_opportunities",
            "description": "Lists the opportunities a sales rep owns: id, name, company, stage and amount.",
            "inputSchema": {
                "type": "object",
                "properties": { "owner": { "type": "string", "description": "The rep's user id." } },
                "required": ["owner"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true }
        },
        {
            "name": "get_company",
            "description": "A company by name, with its domain, account owner and people.",
            "inputSchema": {
                "type": "object",
                "properties": { "name": { "type": "string" } },
                "required": ["name"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true }
        },
        {
            "name": "list_tasks",
            "description": "The open tasks assigned to a user, soonest due first.",
            "inputSchema": {
                "type": "object",
                "properties": { "assignee": { "type": "string" } },
                "required": ["assignee"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true }
        },
        {
            "name": "update_opportunity",
            "description": "Moves an opportunity to another stage.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "id": { "type": "string" },
                    "stage": { "type": "string", "enum": STAGES }
                },
                "required": ["id", "stage"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": false, "idempotentHint": true }
        }
    ])
}

fn text_result(structured: Value) -> Value {
    json!({
        "content": [{ "type": "text", "text": structured.to_string() }],
        "structuredContent": structured,
        "isError": false
    })
}

fn error_result(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 200)
        .ok_or_else(|| format!("{name} is required (a string of at most 200 bytes)"))
}

/// Answers one `tools/call`.
pub async fn call(db: &CrmDb, params: &Value) -> Value {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    let key = params
        .get("_meta")
        .and_then(|m| m.get(IDEMPOTENCY_META_KEY))
        .and_then(Value::as_str);
    let outcome: Result<Value, String> = async {
        let db_err = |e: sqlx::Error| format!("the CRM database: {e}");
        match name {
            "list_opportunities" => {
                let owner = arg(&args, "owner")?;
                let list = db.opportunities(Some(owner)).await.map_err(db_err)?;
                Ok(json!({ "owner": owner, "opportunities": list }))
            }
            "get_company" => {
                let company = db.company(arg(&args, "name")?).await.map_err(db_err)?;
                company.ok_or_else(|| "no company by that name".to_owned())
            }
            "list_tasks" => {
                let assignee = arg(&args, "assignee")?;
                let tasks = db.tasks(assignee).await.map_err(db_err)?;
                Ok(json!({ "assignee": assignee, "tasks": tasks }))
            }
            "update_opportunity" => {
                let (id, stage) = (arg(&args, "id")?, arg(&args, "stage")?);
                if !STAGES.contains(&stage) {
                    return Err(format!("stage must be one of {}", STAGES.join(", ")));
                }
                let key = key.ok_or("an idempotency key (_meta) is required for an update")?;
                match db.update_stage(key, id, stage).await.map_err(db_err)? {
                    Some((o, replayed)) => Ok(json!({ "opportunity": o, "replayed": replayed })),
                    None => Err(format!("no opportunity {id}")),
                }
            }
            other => Err(format!("no tool {other:?}")),
        }
    }
    .await;
    match outcome {
        Ok(v) => text_result(v),
        Err(message) => error_result(&message),
    }
}

/// The answer to one JSON-RPC message; `None` for a notification.
pub async fn answer(db: &CrmDb, message: &Value) -> Option<Value> {
    let id = message.get("id").cloned()?;
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params").cloned().unwrap_or(json!({}));
    let result = match method {
        "initialize" => {
            // Answer in the client's protocol version: the subset used here is in every one.
            let version = params
                .get("protocolVersion")
                .cloned()
                .unwrap_or(json!("2025-06-18"));
            json!({
                "protocolVersion": version,
                "capabilities": { "tools": { "listChanged": false } },
                "serverInfo": { "name": "crm", "version": env!("CARGO_PKG_VERSION") }
            })
        }
        "ping" => json!({}),
        "tools/list" => json!({ "tools": tools() }),
        "tools/call" => call(db, &params).await,
        other => {
            return Some(json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": { "code": -32601, "message": format!("method not found: {other}") }
            }));
        }
    };
    Some(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
}

/// Serves MCP on stdin and stdout until stdin closes.
pub async fn serve_stdio(db: CrmDb) -> std::io::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(message) => answer(&db, &message).await,
            Err(e) => Some(json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": { "code": -32700, "message": format!("parse error: {e}") }
            })),
        };
        if let Some(reply) = reply {
            out.write_all(format!("{reply}\n").as_bytes()).await?;
            out.flush().await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn updates_apply_once_per_key_and_bad_input_is_a_tool_error() {
        let db = CrmDb::open(None).await.unwrap_or_else(|e| panic!("{e}"));
        let update = |key: &str| {
            json!({
                "name": "update_opportunity",
                "arguments": { "id": "opp-3", "stage": "proposal" },
                "_meta": { IDEMPOTENCY_META_KEY: key }
            })
        };
        let first = call(&db, &update("k1")).await;
        assert_eq!(first["structuredContent"]["replayed"], false);
        let again = call(&db, &update("k1")).await;
        assert_eq!(again["structuredContent"]["replayed"], true);
        assert_eq!(db.applied_updates().await.unwrap_or(-1), 1);
        let bad = call(
            &db,
            &json!({ "name": "update_opportunity", "arguments": { "id": "opp-3", "stage": "won!" } }),
        )
        .await;
        assert_eq!(bad["isError"], true);
        let unkeyed = call(
            &db,
            &json!({ "name": "update_opportunity", "arguments": { "id": "opp-3", "stage": "won" } }),
        )
        .await;
        assert_eq!(unkeyed["isError"], true);
        let unknown = answer(
            &db,
            &json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/list" }),
        )
        .await;
        assert_eq!(
            unknown.and_then(|u| u["error"]["code"].as_i64()),
            Some(-32601)
        );
    }
}
