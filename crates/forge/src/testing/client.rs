//! A client of an application's Forge API as its tests drive it: GraphQL over real HTTP with the
//! caller's token — threads, runs, their status and answer, approvals — so an application's test
//! harness holds only what is its own.

use std::time::Duration;

use serde_json::{Value, json};

/// How long [`Client::wait_for_status`] waits for a run before giving up.
const WAIT: Duration = Duration::from_secs(60);

/// A client of the server at one URL.
#[derive(Debug, Clone)]
pub struct Client {
    url: String,
    http: reqwest::Client,
}

/// An approval waiting for a decision, as the one asking may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The interaction's id.
    pub id: String,
    /// Its run.
    pub run_id: String,
    /// Its run's thread.
    pub thread_id: String,
    /// What the tool says the call will do, when it has a previewer.
    pub preview: Option<forge_core::interaction::ApprovalPreview>,
}

/// What a thread's assistant said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Its assistant messages' text, one per line.
    pub text: String,
    /// The source ids its citations name, in order.
    pub cited: Vec<String>,
}

impl Client {
    /// A client of the server at `url` (`http://127.0.0.1:PORT`).
    pub fn new(url: impl Into<String>) -> Self {
        forge_providers::http::install_crypto_provider();
        Self {
            url: url.into().trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// A GraphQL request as `token`: the data, or the first error's message.
    pub async fn gql(&self, token: &str, query: &str, variables: Value) -> Result<Value, String> {
        let body: Value = self
            .http
            .post(format!("{}/graphql", self.url))
            .bearer_auth(token)
            .json(&json!({ "query": query, "variables": variables }))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        match body["errors"].as_array() {
            Some(errors) if !errors.is_empty() => Err(errors[0]["message"].to_string()),
            _ => Ok(body["data"].clone()),
        }
    }

    /// Creates a thread as `token`; its id.
    pub async fn create_thread(&self, token: &str) -> Result<String, String> {
        let data = self
            .gql(token, "mutation { createThread { id } }", json!({}))
            .await?;
        text(&data["createThread"]["id"])
    }

    /// Starts a run of `agent` on `thread` with `message` as `token`; its id.
    pub async fn start_run(
        &self,
        token: &str,
        thread: &str,
        agent: &str,
        message: &str,
    ) -> Result<String, String> {
        let data = self
            .gql(
                token,
                "mutation($i: StartRunInput!) { startRun(input: $i) { id } }",
                json!({ "i": { "threadId": thread, "agent": agent, "message": message } }),
            )
            .await?;
        text(&data["startRun"]["id"])
    }

    /// Starts a run of `agent` with `message` on a new thread as `token`: (thread, run).
    pub async fn ask(
        &self,
        token: &str,
        agent: &str,
        message: &str,
    ) -> Result<(String, String), String> {
        let thread = self.create_thread(token).await?;
        let run = self.start_run(token, &thread, agent, message).await?;
        Ok((thread, run))
    }

    /// The run's status (`queued`, `running`, `waiting`, `completed`, `failed`, `cancelled`).
    pub async fn run_status(&self, token: &str, run: &str) -> Result<String, String> {
        let data = self
            .gql(
                token,
                "query($id: ID!) { run(id: $id) { status } }",
                json!({ "id": run }),
            )
            .await?;
        text(&data["run"]["status"])
    }

    /// Waits until the run's status is one of `statuses`, reading it every 50 ms; the status,
    /// or an error naming the last one after a minute.
    pub async fn wait_for_status(
        &self,
        token: &str,
        run: &str,
        statuses: &[&str],
    ) -> Result<String, String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let status = self.run_status(token, run).await?;
            if statuses.contains(&status.as_str()) {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("run {run} still {status} after {WAIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The approvals `token` may decide, oldest first.
    pub async fn pending_approvals(&self, token: &str) -> Result<Vec<Pending>, String> {
        let data = self
            .gql(
                token,
                "{ pendingInteractions(first: 100) { nodes { id runId threadId kind request } } }",
                json!({}),
            )
            .await?;
        data["pendingInteractions"]["nodes"]
            .as_array()
            .ok_or("no pendingInteractions in the answer")?
            .iter()
            .filter(|n| n["kind"] == "approval")
            .map(|n| {
                Ok(Pending {
                    id: text(&n["id"])?,
                    run_id: text(&n["runId"])?,
                    thread_id: text(&n["threadId"])?,
                    preview: match n["request"].get("preview") {
                        None | Some(Value::Null) => None,
                        Some(p) => Some(
                            serde_json::from_value(p.clone())
                                .map_err(|e| format!("an unreadable preview: {e}"))?,
                        ),
                    },
                })
            })
            .collect()
    }

    /// Approves `interaction` as `token`, under a key fixed for it (approving again is the same
    /// decision).
    pub async fn approve(&self, token: &str, interaction: &str) -> Result<Value, String> {
        self.gql(
            token,
            "mutation($id: ID!, $key: String!) { resolveApproval(interactionId: $id, approve: true, key: $key) { status } }",
            json!({ "id": interaction, "key": format!("approve-{interaction}") }),
        )
        .await
    }

    /// What the thread's assistant said (its first 100 messages).
    pub async fn answer(&self, token: &str, thread: &str) -> Result<Answer, String> {
        let data = self
            .gql(
                token,
                "query($id: ID!) { thread(id: $id) { messages(first: 100) { nodes { role text parts } } } }",
                json!({ "id": thread }),
            )
            .await?;
        let nodes = data["thread"]["messages"]["nodes"]
            .as_array()
            .ok_or("no messages in the answer")?;
        let text = nodes
            .iter()
            .filter(|n| n["role"] == "assistant")
            .map(|n| n["text"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let cited = nodes
            .iter()
            .flat_map(|n| n["parts"].as_array().into_iter().flatten())
            .filter(|p| p["type"] == "citation")
            .map(|p| p["source_id"].as_str().unwrap_or("").to_owned())
            .collect();
        Ok(Answer { text, cited })
    }
}

/// A string in the answer, or an error showing what was there.
fn text(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("expected a string, got {value}"))
}
