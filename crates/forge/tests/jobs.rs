//! Durable application jobs through the facade: a job is a run of its own agent whose handler
//! runs once per attempt and answers the caller; under a request key it is queued once; the
//! policies decide who may run it; a job whose process died is finished by another worker.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use forge::core::ports::tool::ToolError;
use forge::prelude::*;
use forge::{Job, JobError};
use serde_json::{Value, json};

/// A job that doubles `n`, counting its calls; `n` < 0 fails.
fn double(calls: Arc<AtomicUsize>) -> Job {
    Job::new("double", move |ctx, input: Value| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let n = input["n"]
                .as_i64()
                .ok_or_else(|| ToolError::InvalidInput("n is an integer".into()))?;
            if n < 0 {
                return Err(ToolError::Failed(format!("{n} is negative")));
            }
            Ok(json!({ "twice": n * 2, "key": ctx.idempotency_key.to_string() }))
        }
    })
    .permission("numbers.double")
}

const POLICIES: &str = r#"
permit (principal, action, resource is Forge::Thread);
permit (
  principal in Forge::Role::"clerk",
  action in [Forge::Action::"discover", Forge::Action::"execute"],
  resource is Forge::Tool
)
when { resource has permission && resource.permission == "numbers.double" };
"#;

async fn deployment(calls: Arc<AtomicUsize>) -> Forge {
    let cedar =
        Arc::new(forge::policy::CedarAuthorizer::from_sources([("jobs.cedar", POLICIES)]).unwrap());
    Forge::builder()
        .store("memory")
        .job(double(calls))
        .engine(move |engine| Ok(engine.authorizer(cedar)))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_job_answers_what_its_handler_returned_and_is_a_run_like_any_other() {
    let calls = Arc::new(AtomicUsize::new(0));
    let forge = deployment(calls.clone()).await;
    let clerk = Scope::parse("acme", "carl", &["clerk"]).unwrap();
    let answer = forge
        .jobs()
        .run(&clerk, "double", json!({ "n": 21 }), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer["twice"], 42);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A handler's failure is the job's answer, with its code; nothing is retried by itself.
    let failed = forge
        .jobs()
        .run(&clerk, "double", json!({ "n": -1 }), None)
        .await
        .unwrap();
    assert_eq!(
        failed,
        Err(JobError::Failed {
            code: "tool_failed".into(),
            message: "-1 is negative".into()
        })
    );
    // Input that is not an object never reaches a queue.
    assert!(
        forge
            .jobs()
            .run(&clerk, "double", json!(3), None)
            .await
            .is_err()
    );
    assert!(matches!(
        forge.jobs().run(&clerk, "triple", json!({}), None).await,
        Err(forge::Error::UnknownAgent(_))
    ));
    forge.shutdown().await;
}

#[tokio::test]
async fn a_job_sent_again_under_its_key_is_the_job_already_started() {
    let calls = Arc::new(AtomicUsize::new(0));
    let forge = deployment(calls.clone()).await;
    let clerk = Scope::parse("acme", "carl", &["clerk"]).unwrap();
    let first = forge
        .jobs()
        .run(&clerk, "double", json!({ "n": 2 }), Some("import-7"))
        .await
        .unwrap()
        .unwrap();
    let again = forge
        .jobs()
        .run(&clerk, "double", json!({ "n": 2 }), Some("import-7"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first, again,
        "the first job's answer, idempotency key included"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    // Another input under the key is another request: refused, not merged.
    assert!(
        forge
            .jobs()
            .run(&clerk, "double", json!({ "n": 3 }), Some("import-7"))
            .await
            .is_err()
    );
    // Another tenant's key is its own.
    let other = Scope::parse("globex", "carl", &["clerk"]).unwrap();
    forge
        .jobs()
        .run(&other, "double", json!({ "n": 2 }), Some("import-7"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    forge.shutdown().await;
}

#[tokio::test]
async fn the_policies_decide_who_may_run_a_job() {
    let calls = Arc::new(AtomicUsize::new(0));
    let forge = deployment(calls.clone()).await;
    let visitor = Scope::parse("acme", "vera", &["visitor"]).unwrap();
    let refused = forge
        .jobs()
        .run(&visitor, "double", json!({ "n": 2 }), None)
        .await
        .unwrap();
    assert!(
        matches!(&refused, Err(JobError::Failed { .. })),
        "{refused:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler never ran");
    forge.shutdown().await;
}

/// The first attempt of `stalls` never ends (its process is about to die); the next answers.
fn stalls(calls: Arc<AtomicUsize>) -> Job {
    Job::new("stalls", move |_ctx, _input: Value| {
        let calls = calls.clone();
        async move {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok(json!("done"))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_process_died_is_finished_by_another_worker() {
    let dir = std::env::temp_dir().join(format!("forge-jobs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("forge.db").display());
    let calls = Arc::new(AtomicUsize::new(0));
    let build = |holder: &str| {
        Forge::builder()
            .store(url.clone())
            .job(stalls(calls.clone()))
            .worker(forge::engine::WorkerConfig {
                id: holder.into(),
                ..Default::default()
            })
            .engine(|engine| Ok(engine.lease_ttl(std::time::Duration::from_millis(500))))
    };
    let scope = Scope::parse("acme", "alice", &[]).unwrap();
    let first = build("first").without_worker().build().await.unwrap();
    let job = first
        .jobs()
        .enqueue(&scope, "stalls", json!({}), Some("nightly"))
        .await
        .unwrap();
    let engine = first.engine().clone();
    let (s, id) = (scope.clone(), job.id());
    let attempt = tokio::spawn(async move {
        let cancel = tokio_util::sync::CancellationToken::new();
        let _ = engine
            .execute(&s, id, &cancel, &forge::engine::NoopObserver)
            .await;
    });
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Its process dies mid-job: the attempt stops where it is, its lease held.
    attempt.abort();
    drop(first);
    let second = build("second").build().await.unwrap();
    // Sent again under its key after the crash: the same job, finished by the second worker.
    let answer = second
        .jobs()
        .run(&scope, "stalls", json!({}), Some("nightly"))
        .await
        .unwrap();
    assert_eq!(answer, Ok(json!("done")));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one more attempt, not a second job"
    );
    assert_eq!(
        second
            .run(&scope, job.id())
            .await
            .unwrap()
            .wait()
            .await
            .unwrap()
            .answer(),
        Some(r#"{"ok":true,"output":"done"}"#)
    );
    second.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
