//! Keyed requests over GraphQL: a start sent again with its idempotency key is the run (and the
//! approval) the first one made, on every store and under racing retries; another request under
//! the key is `CONFLICT`; a thread's external key finds the thread it named.

use std::sync::Arc;

use forge_core::ports::store::Store;
use serde_json::{Value, json};

use crate::support::{Opts, Srv, postgres_store, sqlite_store, start, token};

const START: &str = "mutation($t: ID!, $m: String!, $k: String) {
    startRun(input: {threadId: $t, agent: \"assistant\", message: $m, idempotencyKey: $k}) { id }
}";

async fn keyed_start(srv: &Srv, token: &str, thread: &str, message: &str, key: &str) -> Value {
    srv.post(
        Some(token),
        START,
        json!({"t": thread, "m": message, "k": key}),
    )
    .await
    .1
}

fn run_id(body: &Value) -> String {
    body["data"]["startRun"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {body}"))
        .to_owned()
}

async fn runs_of(srv: &Srv, token: &str, thread: &str) -> Vec<String> {
    let d = srv
        .gql(
            token,
            "query($id: ID!) { thread(id: $id) { runs { nodes { id } } } }",
            json!({"id": thread}),
        )
        .await;
    d["thread"]["runs"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn retried_starts_are_one_run(store: Arc<dyn Store>) {
    let srv = start(Opts {
        store,
        ..Opts::default()
    })
    .await;
    let alice = token("acme", "alice", &["member"]);

    // A start sent again (a client that timed out) is the first one's run and approval.
    let thread = srv.thread(&alice).await;
    let first = run_id(&keyed_start(&srv, &alice, &thread, "email them", "send-1").await);
    srv.wait_status(&alice, &first, "waiting").await;
    let again = run_id(&keyed_start(&srv, &alice, &thread, "email them", "send-1").await);
    assert_eq!(again, first, "a retried start is the first run");
    assert_eq!(runs_of(&srv, &alice, &thread).await, vec![first.clone()]);
    // Listed to whoever may decide it: not its own starter.
    let approver = token("acme", "dana", &["approver"]);
    let pending = srv
        .gql(
            &approver,
            "{ pendingInteractions { nodes { runId } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        pending["pendingInteractions"]["nodes"],
        json!([{"runId": first}]),
        "one approval"
    );

    // Another request under the key is refused, and starts nothing.
    let other = keyed_start(&srv, &alice, &thread, "email someone else", "send-1").await;
    assert_eq!(
        other["errors"][0]["extensions"]["code"], "CONFLICT",
        "{other}"
    );
    let bob = token("acme", "bob", &["member"]);
    let bobs = keyed_start(&srv, &bob, &thread, "email them", "send-1").await;
    assert_eq!(
        bobs["errors"][0]["extensions"]["code"], "CONFLICT",
        "{bobs}"
    );
    assert_eq!(runs_of(&srv, &alice, &thread).await.len(), 1);

    // Six racing retries of one start make one run.
    let thread = srv.thread(&alice).await;
    let racing = (0..6).map(|_| keyed_start(&srv, &alice, &thread, "hello", "race-1"));
    let ids: Vec<String> = futures_util::future::join_all(racing)
        .await
        .iter()
        .map(run_id)
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(runs_of(&srv, &alice, &thread).await, vec![ids[0].clone()]);

    // The same key in another tenant is that tenant's own.
    let carol = token("globex", "carol", &["member"]);
    let theirs = srv.thread(&carol).await;
    let id = run_id(&keyed_start(&srv, &carol, &theirs, "hello", "race-1").await);
    assert_ne!(id, ids[0]);
    srv.stop.cancel();
}

#[tokio::test]
async fn a_retried_start_is_one_run_in_memory() {
    retried_starts_are_one_run(Arc::new(forge_store_memory::MemoryStore::default())).await;
}

#[tokio::test]
async fn a_retried_start_is_one_run_on_sqlite() {
    let (store, dir) = sqlite_store().await;
    retried_starts_are_one_run(store).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_retried_start_is_one_run_on_postgres() {
    retried_starts_are_one_run(postgres_store().await).await;
}

#[tokio::test]
async fn an_external_key_names_one_thread() {
    let srv = start(Opts::default()).await;
    let alice = token("acme", "alice", &["member"]);
    const CREATE: &str = "mutation($k: String, $t: String) {
        createThread(externalKey: $k, title: $t) { id title }
    }";
    let first = srv
        .gql(&alice, CREATE, json!({"k": "crm:account:42", "t": "Acme"}))
        .await;
    let racing = (0..4).map(|_| {
        srv.gql(
            &alice,
            CREATE,
            json!({"k": "crm:account:42", "t": "another title"}),
        )
    });
    for again in futures_util::future::join_all(racing).await {
        assert_eq!(again, first, "the key's thread, its own title kept");
    }
    let other = srv
        .gql(
            &alice,
            CREATE,
            json!({"k": "crm:account:43", "t": "Initech"}),
        )
        .await;
    assert_ne!(other["createThread"]["id"], first["createThread"]["id"]);
    let unkeyed = srv.gql(&alice, CREATE, json!({"t": "Acme"})).await;
    assert_ne!(unkeyed["createThread"]["id"], first["createThread"]["id"]);

    let bad = srv
        .post(Some(&alice), CREATE, json!({"k": "k".repeat(300)}))
        .await
        .1;
    assert_eq!(
        bad["errors"][0]["extensions"]["code"], "BAD_REQUEST",
        "{bad}"
    );
    srv.stop.cancel();
}
