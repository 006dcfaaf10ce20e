//! Row-level security, checked below the adapter: raw SQL as the application role sees none of
//! another tenant's rows, and the adapter will not start as a role that would bypass the policies.

use std::sync::Arc;

use forge_core::part::Part;
use forge_core::ports::queue::JobQueue;
use forge_core::ports::store::{NewRun, NewThread, RunStore, StepCommit, ThreadStore};
use forge_core::run::{Checkpoint, RunStatus};
use forge_core::time::{Clock, ManualClock};
use forge_store_postgres::testing::{Flavor, TestDatabase, admin_url};
use forge_store_postgres::{Mode, OpenError, PostgresStore};
use forge_testkit::fixtures::{agent_ref, scope};
use sqlx::{Connection, PgConnection};

/// Tenant A's rows per table after `seed_tenant_a` (two committed steps: two events).
const TENANT_A_ROWS: [i64; 16] = [1, 1, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];

const TABLES: [&str; 16] = [
    "forge_threads",
    "forge_messages",
    "forge_runs",
    "forge_run_events",
    "forge_jobs",
    "forge_audit",
    "forge_interactions",
    "forge_model_calls",
    "forge_sources",
    "forge_chunks",
    "forge_chunk_vectors",
    "forge_files",
    "forge_eval_runs",
    "forge_eval_cases",
    "forge_eval_judgements",
    "forge_request_keys",
];

/// Tenant A gets a thread, a run (with its job), a committed step with events and a message, and
/// an audit entry (an operator replayed its dead-lettered job).
async fn seed_tenant_a(store: &PostgresStore, clock: &ManualClock) {
    let a = scope("tenant-a");
    let thread = store.create_thread(&a, NewThread::default()).await.unwrap();
    let mut new = NewRun::new(thread.id, agent_ref(), vec![Part::text("secret")]);
    new.max_attempts = 1;
    let run = store.create_run(&a, new).await.unwrap();
    let lease = store
        .acquire_lease(&a, run.id, "w", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let events = vec![forge_core::event::RunEvent {
        run_id: run.id,
        seq: 1,
        at: clock.now(),
        kind: forge_core::event::RunEventKind::StepStarted { step: 1 },
    }];
    let commit = StepCommit {
        run_id: run.id,
        expected_version: 0,
        lease,
        events,
        messages: vec![forge_core::message::Message {
            id: forge_core::id::MessageId(uuid::Uuid::now_v7()),
            run_id: run.id,
            role: forge_core::message::Role::User,
            parts: vec![Part::text("secret")],
            created_at: clock.now(),
        }],
        checkpoint: Checkpoint::default(),
        status: RunStatus::Running,
        failure: None,
        interactions: vec![],
        audit: vec![],
        settlements: vec![forge_core::metering::ModelCall {
            id: forge_core::id::ModelCallId(uuid::Uuid::now_v7()),
            tenant_id: a.tenant_id().clone(),
            run_id: run.id,
            step: 1,
            attempt: 1,
            model: "scripted:x".into(),
            at: clock.now(),
            period_start: clock.now(),
            estimate: Default::default(),
            estimated_cost_micros: 0,
            actual: Some(Default::default()),
            cost_micros: Some(0),
            request_id: None,
            provider_model: None,
            holder: None,
            trace_id: None,
            status: forge_core::metering::CallStatus::Settled,
        }],
        state: None,
        summary: None,
        job: None,
    };
    let done = store.commit_step(&a, commit).await.unwrap();
    // The run then parks on an approval.
    let lease = store
        .acquire_lease(&a, run.id, "w", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let input = serde_json::json!({"amount": 5});
    let park = StepCommit {
        run_id: run.id,
        expected_version: done.version,
        lease,
        events: vec![forge_core::event::RunEvent {
            run_id: run.id,
            seq: 2,
            at: clock.now(),
            kind: forge_core::event::RunEventKind::StepStarted { step: 2 },
        }],
        messages: vec![],
        checkpoint: Checkpoint::default(),
        status: RunStatus::Waiting(forge_core::run::WaitReason::Approval),
        failure: None,
        interactions: vec![forge_core::interaction::Interaction {
            id: forge_core::id::InteractionId(uuid::Uuid::now_v7()),
            tenant_id: a.tenant_id().clone(),
            run_id: run.id,
            thread_id: thread.id,
            step: 2,
            agent: agent_ref(),
            request: forge_core::interaction::InteractionRequest::Approval {
                tool_call_id: forge_core::id::ToolCallId("c".into()),
                tool_name: "pay".into(),
                input_hash: forge_core::interaction::input_hash(&input),
                input,
                preview: None,
            },
            status: forge_core::interaction::InteractionStatus::Pending,
            resolution: None,
            created_at: clock.now(),
            expires_at: clock.now().plus(std::time::Duration::from_secs(3600)),
        }],
        audit: vec![],
        settlements: vec![],
        state: None,
        summary: None,
        job: None,
    };
    store.commit_step(&a, park).await.unwrap();
    // A dead letter replayed by an operator leaves an audit entry.
    let sys = forge_core::scope::SystemScope::new("test");
    let job = store
        .claim(
            &sys,
            "w",
            std::time::Duration::from_secs(60),
            &Default::default(),
        )
        .await
        .unwrap()
        .unwrap();
    store
        .fail(&sys, &job, std::time::Duration::from_secs(1), "poison")
        .await
        .unwrap();
    store.replay(&sys, job.id, "operator").await.unwrap();
    // A retrieval source with one chunk.
    let source = forge_rag::ingest::ingest(
        forge_rag::SourceId::new("handbook").unwrap(),
        "Handbook",
        "internal",
        forge_rag::Format::Text,
        serde_json::Value::Null,
        "Tenant A's secret handbook.",
    );
    forge_rag::SourceStore::put_source(store, &a, &source)
        .await
        .unwrap();
    assert!(
        forge_rag::SourceStore::put_vectors(
            store,
            &a,
            &source.id,
            &source.version,
            "test:model",
            &[vec![0.6, 0.8]]
        )
        .await
        .unwrap()
    );
    // A stored file's record (its acceptance is audited: the second audit row).
    let file = forge_testkit::files::record(&a, clock, 1, "secret.txt");
    forge_files::FileStore::put_file(store, &a, &file, "alice")
        .await
        .unwrap();
    // A scoring run with one case, and a cached judge verdict.
    use forge_eval::EvalStore;
    let scoring = forge_testkit::evals::scoring_run(&a, clock, 1, "core");
    store.start_scoring(&a, &scoring).await.unwrap();
    let result = forge_testkit::evals::case(
        "secret-case",
        &[forge_eval::Dimension::Authorization],
        forge_eval::Verdict::Fail,
        0,
        clock.now(),
    );
    store.record_case(&a, scoring.id, &result).await.unwrap();
    store
        .put_judgement(
            &a,
            &forge_eval::JudgeKey {
                case_id: "secret-case".into(),
                input_sha256: "sha256:00".into(),
                prompt: "refusal@1".into(),
                model: "scripted:judge".into(),
            },
            &forge_eval::JudgeVerdict {
                score_ppm: 0,
                reason: "complies".into(),
                cost_micros: 0,
                usage: Default::default(),
            },
        )
        .await
        .unwrap();
    // The run's idempotency key.
    use forge_core::ports::keys::{KeyClaim, KeyKind, RequestKeys};
    let claim = KeyClaim {
        id: run.id.0,
        thread_id: thread.id,
        digest: "d".into(),
    };
    store
        .claim_key(&a, KeyKind::Run, "secret-key", claim)
        .await
        .unwrap();
}

/// Counts every table's rows in one transaction after `setup` statements, as the connected role.
async fn counts(conn: &mut PgConnection, setup: &[&str]) -> Vec<i64> {
    let mut tx = conn.begin().await.unwrap();
    for s in setup {
        sqlx::raw_sql(sqlx::AssertSqlSafe(s.to_string()))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let mut out = Vec::new();
    for t in TABLES {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {t}")))
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        out.push(n);
    }
    tx.rollback().await.unwrap();
    out
}

/// Tries to change or remove tenant A's rows, each statement in its own transaction; returns the
/// rows affected per statement (a statement refused for lack of privilege counts as 0).
async fn tamper(conn: &mut PgConnection, setup: &[&str]) -> Vec<u64> {
    let mut out = Vec::new();
    for sql in [
        "UPDATE forge_threads SET title = 'pwned'",
        "UPDATE forge_runs SET status = 'cancelled'",
        "DELETE FROM forge_run_events",
        "DELETE FROM forge_messages",
        "UPDATE forge_jobs SET state = 'dead'",
        "UPDATE forge_audit SET actor = 'mallory'",
        "DELETE FROM forge_audit",
        "UPDATE forge_interactions SET status = 'resolved'",
        "DELETE FROM forge_model_calls",
        "DELETE FROM forge_chunk_vectors",
        "UPDATE forge_eval_cases SET verdict = 'pass'",
        "DELETE FROM forge_eval_judgements",
    ] {
        let mut tx = conn.begin().await.unwrap();
        for s in setup {
            sqlx::raw_sql(sqlx::AssertSqlSafe(s.to_string()))
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        match sqlx::query(sql).execute(&mut *tx).await {
            Ok(done) => out.push(done.rows_affected()),
            Err(e) if e.to_string().contains("permission denied") => out.push(0),
            Err(e) => panic!("{sql}: {e}"),
        }
        tx.rollback().await.unwrap();
    }
    out
}

#[tokio::test]
async fn raw_sql_as_the_application_role_sees_only_its_tenant() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _) = crate::fresh(Flavor::Plain, clock.clone()).await;
    seed_tenant_a(&store, &clock).await;
    // Connect as the application role itself, never as a superuser.
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let who: (String, bool, bool) = sqlx::query_as("SELECT current_user::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        who,
        ("forge_test_app".to_owned(), false, false),
        "the check must run as the application role"
    );

    assert_eq!(
        counts(
            &mut conn,
            &["SELECT set_config('forge.tenant_id', 'tenant-a', true)"]
        )
        .await,
        TENANT_A_ROWS,
        "tenant A sees its rows"
    );
    assert_eq!(
        counts(
            &mut conn,
            &["SELECT set_config('forge.tenant_id', 'tenant-b', true)"]
        )
        .await,
        [0; 16],
        "tenant B sees none"
    );
    assert_eq!(
        counts(&mut conn, &[]).await,
        [0; 16],
        "no tenant setting sees none"
    );
    assert_eq!(
        counts(
            &mut conn,
            &["SELECT set_config('forge.tenant_id', '', true)"]
        )
        .await,
        [0; 16]
    );
    assert_eq!(
        tamper(
            &mut conn,
            &["SELECT set_config('forge.tenant_id', 'tenant-b', true)"]
        )
        .await,
        [0; 12],
        "B changes nothing of A's"
    );
    assert_eq!(tamper(&mut conn, &[]).await, [0; 12]);

    // The audit trail is append-only even for its own tenant.
    let a_own = tamper(
        &mut conn,
        &["SELECT set_config('forge.tenant_id', 'tenant-a', true)"],
    )
    .await;
    assert_eq!(
        &a_own[5..7],
        [0, 0],
        "tenant A can neither change nor delete its audit entries"
    );
    // Writing a row for another tenant is refused by the policy's WITH CHECK.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('forge.tenant_id', 'tenant-b', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = sqlx::query(
        "INSERT INTO forge_threads (id, tenant_id, created_by, state, state_version, created_at) \
         VALUES (gen_random_uuid(), 'tenant-a', 'mallory', '{}', 0, now())",
    )
    .execute(&mut *tx)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("row-level security"), "{err}");
}

/// The system scope is not a setting (issue 16, item 3): the application role, turning on
/// whatever it likes, reaches no other tenant's rows; only `forge_system`'s functions work across
/// tenants, and the application role can neither become that role nor call the functions'
/// internal helper.
#[tokio::test]
async fn the_application_role_cannot_forge_the_system_scope() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _) = crate::fresh(Flavor::Plain, clock.clone()).await;
    seed_tenant_a(&store, &clock).await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let forged: [&[&str]; 4] = [
        &["SELECT set_config('forge.system', 'on', true)"],
        &[
            "SELECT set_config('forge.system', 'on', true)",
            "SELECT set_config('forge.tenant_id', 'tenant-b', true)",
        ],
        &["SET LOCAL forge.system = 'on'"],
        &[
            "SELECT set_config('forge.system', 'on', false)",
            "SELECT set_config('forge.app_role', 'forge_system', true)",
        ],
    ];
    for setup in forged {
        assert_eq!(
            counts(&mut conn, setup).await,
            [0; 16],
            "{setup:?} sees none"
        );
        assert_eq!(
            tamper(&mut conn, setup).await,
            [0; 12],
            "{setup:?} changes none"
        );
    }
    sqlx::query("RESET forge.system")
        .execute(&mut conn)
        .await
        .unwrap();
    // Writing another tenant's audit entry under a forged scope is refused.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('forge.system', 'on', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = sqlx::query(
        "INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) \
         VALUES ('tenant-a', now(), 'mallory', 'approval.approved', 'x', '{}')",
    )
    .execute(&mut *tx)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("row-level security"), "{err}");
    tx.rollback().await.unwrap();
    // Nor can it become the role, or call the helper that locks any job row.
    for sql in [
        "SET ROLE forge_system",
        "SELECT forge_sys_holds(gen_random_uuid(), 1, now())",
    ] {
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .expect_err(sql);
        assert!(
            err.to_string().contains("permission denied"),
            "{sql}: {err}"
        );
    }
    // What it may do across tenants is exactly the queue's operations: here, list dead letters
    // (none: the seeded one was replayed) and find the seeded job by id.
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM forge_sys_jobs(NULL, 'dead', 10)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(dead, 0);
    let all: i64 = sqlx::query_scalar("SELECT count(*) FROM forge_sys_jobs(NULL, NULL, 10)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(all, 1, "the system function does see across tenants");
}

/// The application role must not be able to act as `forge_system`: a start as a member of it is
/// refused, as is a start before an administrator provisioned it.
#[tokio::test]
async fn refuses_to_start_where_the_system_role_is_forgeable_or_missing() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut admin = PgConnection::connect(db.admin_url()).await.unwrap();
    // Functions the application role made itself are not forge_system's.
    sqlx::raw_sql(
        "ALTER FUNCTION forge_sys_claim(timestamptz, timestamptz, uuid, text[], text[]) OWNER TO forge_test_app",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let err = PostgresStore::connect(db.url(), Mode::Rls)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OpenError::SystemRole { problem } if problem.contains("11 of 12")),
        "{err}"
    );
    assert!(err.to_string().contains("forge migrate"), "{err}");
    // Provisioning again restores them, and refuses an application role that is a member.
    forge_store_postgres::provision_system(db.admin_url(), "forge_test_app")
        .await
        .unwrap();
    PostgresStore::connect(db.url(), Mode::Rls)
        .await
        .unwrap()
        .close()
        .await;
    // A login role that is a member of forge_system (roles are cluster-wide: a role of its own,
    // so no other test's application role changes).
    sqlx::raw_sql(
        "BEGIN; SELECT pg_advisory_xact_lock(7277267);
         DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_test_member') THEN
             CREATE ROLE forge_test_member LOGIN PASSWORD 'forge_test'; GRANT forge_system TO forge_test_member;
         END IF; END $$; COMMIT;
         GRANT ALL ON SCHEMA public TO forge_test_member;",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let member = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut member_admin = PgConnection::connect(member.admin_url()).await.unwrap();
    // With what the application role is granted (the ledger, read before the roles are checked).
    sqlx::raw_sql(
        "GRANT ALL ON SCHEMA public TO forge_test_member;
         GRANT SELECT ON forge_migrations TO forge_test_member",
    )
    .execute(&mut member_admin)
    .await
    .unwrap();
    let url = member.url().replace("forge_test_app", "forge_test_member");
    let err = PostgresStore::connect(&url, Mode::Rls).await.unwrap_err();
    assert!(
        matches!(&err, OpenError::SystemRole { problem } if problem.contains("member of forge_system")),
        "{err}"
    );
    let again =
        forge_store_postgres::provision_system(member.admin_url(), "forge_test_member").await;
    assert!(
        matches!(again, Err(OpenError::SystemRole { .. })),
        "{again:?}"
    );

    // A database nobody provisioned: the application role may not migrate it, and says who does.
    let bare = TestDatabase::create_unprovisioned(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PostgresStore::connect(bare.url(), Mode::Rls)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OpenError::Unmigrated { pending: 36 }),
        "{err}"
    );
    assert!(err.to_string().contains("forge migrate"), "{err}");
}

/// Issue 73, item 3: in RLS mode the application role owns no table, policy or function, so SQL
/// run with its credentials cannot switch row-level security off, drop or add a policy, replace
/// the functions the policies call, or become the roles that own them; and a schema an earlier
/// build's application role made and owns is handed over by provisioning. Sabotage: migrating as
/// the application role (as builds before this one did) lets the first `NO FORCE` through;
/// `owner_adopt.sql` not handing the tables over fails the hand-over.
#[tokio::test]
async fn the_application_role_can_change_no_table_policy_or_function() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut app = PgConnection::connect(db.url()).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        r"SELECT relname::text FROM pg_class WHERE relnamespace = 'public'::regnamespace
           AND relkind = 'r' AND relforcerowsecurity AND relname LIKE 'forge\_%' ORDER BY relname",
    )
    .fetch_all(&mut app)
    .await
    .unwrap();
    assert!(tables.len() >= 15, "{tables:?}");
    let policies: Vec<(String, String)> = sqlx::query_as(
        "SELECT tablename::text, policyname::text FROM pg_policies WHERE schemaname = 'public'",
    )
    .fetch_all(&mut app)
    .await
    .unwrap();
    assert!(policies.len() >= tables.len(), "{policies:?}");
    let mut statements: Vec<String> = tables
        .iter()
        .flat_map(|t| {
            [
                format!("ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY"),
                format!("ALTER TABLE {t} DISABLE ROW LEVEL SECURITY"),
                format!("CREATE POLICY open ON {t} USING (true)"),
                format!("ALTER TABLE {t} OWNER TO forge_test_app"),
            ]
        })
        .collect();
    statements.extend(
        policies
            .iter()
            .map(|(t, p)| format!("DROP POLICY {p} ON {t}")),
    );
    statements.extend([
        "CREATE OR REPLACE FUNCTION forge_system_scope() RETURNS boolean LANGUAGE sql AS 'SELECT true'".to_owned(),
        "CREATE OR REPLACE FUNCTION forge_current_tenant() RETURNS text LANGUAGE sql AS $$ SELECT 'acme' $$".to_owned(),
        "ALTER FUNCTION forge_current_tenant() OWNER TO forge_test_app".to_owned(),
        "SET ROLE forge_owner".to_owned(),
        "SET ROLE forge_system".to_owned(),
    ]);
    for sql in &statements {
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.as_str()))
            .execute(&mut app)
            .await
            .expect_err(sql);
        let text = err.to_string();
        assert!(
            text.contains("must be owner") || text.contains("permission denied"),
            "{sql}: {text}"
        );
    }
    // What running Forge needs it has: the store starts.
    PostgresStore::connect(db.url(), Mode::Rls)
        .await
        .unwrap()
        .close()
        .await;

    // A schema an earlier build's application role made and owns: provisioning hands it over.
    let mut admin = PgConnection::connect(db.admin_url()).await.unwrap();
    sqlx::raw_sql(
        r"DO $$ DECLARE r record; BEGIN
             FOR r IN SELECT oid::regclass AS t FROM pg_class
                       WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'
                         AND relname LIKE 'forge\_%' LOOP
                 EXECUTE format('ALTER TABLE %s OWNER TO forge_test_app', r.t);
             END LOOP;
         END $$",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    forge_store_postgres::provision_system(db.admin_url(), "forge_test_app")
        .await
        .unwrap();
    for table in &tables {
        let sql = format!("ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY");
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.as_str()))
            .execute(&mut app)
            .await
            .expect_err(&sql);
        assert!(err.to_string().contains("must be owner"), "{sql}: {err}");
    }
}

#[tokio::test]
async fn raw_sql_as_forges_tenant_role_with_another_tenants_jwt_sees_nothing() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _) = crate::fresh(Flavor::Supabase, clock.clone()).await;
    seed_tenant_a(&store, &clock).await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let as_jwt = |tenant: &str| {
        format!(
            "SELECT set_config('role', 'forge_tenant', true), set_config('request.jwt.claims', '{{\"role\":\"authenticated\",\"sub\":\"u\",\"tenant_id\":\"{tenant}\"}}', true)"
        )
    };
    let a = as_jwt("tenant-a");
    let b = as_jwt("tenant-b");
    assert_eq!(counts(&mut conn, &[&a]).await, TENANT_A_ROWS);
    assert_eq!(counts(&mut conn, &[&b]).await, [0; 16]);
    assert_eq!(
        counts(
            &mut conn,
            &["SELECT set_config('role', 'forge_tenant', true)"]
        )
        .await,
        [0; 16],
        "no claims see none"
    );
    // `anon` (a request without a signed-in user) is refused the tables outright.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('role', 'anon', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = sqlx::query("SELECT count(*) FROM forge_runs")
        .execute(&mut *tx)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("permission denied for table forge_runs"),
        "{err}"
    );
    tx.rollback().await.unwrap();
    assert_eq!(tamper(&mut conn, &[&b]).await, [0; 12]);
    // The tenant may also come from app_metadata, as Supabase auth hooks often put it.
    let meta = "SELECT set_config('role', 'forge_tenant', true), set_config('request.jwt.claims', '{\"app_metadata\":{\"tenant_id\":\"tenant-a\"}}', true)";
    assert_eq!(counts(&mut conn, &[meta]).await, TENANT_A_ROWS);
}

/// Supabase serves tables in `public` to any signed-in user as `authenticated` (issue 16, item 2):
/// with a valid JWT of their own tenant, such a user can read no Forge table and write none — not
/// the event log, not an approval they would grant themselves.
#[tokio::test]
async fn a_signed_in_supabase_user_cannot_touch_forge_tables_directly() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, url, _) = crate::fresh(Flavor::Supabase, clock.clone()).await;
    seed_tenant_a(&store, &clock).await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let own = "SELECT set_config('role', 'authenticated', true), set_config('request.jwt.claims', '{\"role\":\"authenticated\",\"sub\":\"u\",\"tenant_id\":\"tenant-a\"}', true)";
    let mut statements: Vec<String> = TABLES
        .iter()
        .chain(&["forge_locks", "forge_migrations", "forge_listeners"])
        .map(|t| format!("SELECT count(*) FROM {t}"))
        .collect();
    statements.extend(
        [
            "UPDATE forge_interactions SET status = 'resolved'",
            "DELETE FROM forge_run_events",
            "DELETE FROM forge_audit",
            "UPDATE forge_runs SET status = 'cancelled'",
            "INSERT INTO forge_audit (tenant_id, at, actor, action, subject, detail) VALUES ('tenant-a', now(), 'me', 'approval.approved', 'x', '{}')",
            // Supabase's REST layer serves functions too: the system ones are not theirs.
            "SELECT * FROM forge_sys_claim(now(), now() + interval '1 hour', NULL, NULL, NULL)",
            "SELECT * FROM forge_sys_jobs(NULL, NULL, 10)",
            "SELECT * FROM forge_sys_due_interactions(now())",
        ]
        .map(String::from),
    );
    for sql in statements {
        let mut tx = conn.begin().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(own.to_owned()))
            .execute(&mut *tx)
            .await
            .unwrap();
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut *tx)
            .await
            .expect_err(&sql);
        assert!(
            err.to_string().contains("permission denied"),
            "{sql}: {err}"
        );
        tx.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn refuses_to_start_as_a_superuser_or_a_bypassrls_role() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PostgresStore::connect(db.admin_url(), Mode::Rls)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OpenError::BypassesRls { role } if role == "postgres"),
        "{err}"
    );
    assert!(
        err.to_string().contains("bypasses row-level security"),
        "{err}"
    );

    let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN; SELECT pg_advisory_xact_lock(7277266);
         DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'forge_test_bypass') THEN
             CREATE ROLE forge_test_bypass LOGIN BYPASSRLS PASSWORD 'forge_test'; END IF; END $$; COMMIT;",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let url = db.url().replace("forge_test_app", "forge_test_bypass");
    let err = PostgresStore::connect(&url, Mode::Rls).await.unwrap_err();
    assert!(
        matches!(&err, OpenError::BypassesRls { role } if role == "forge_test_bypass"),
        "{err}"
    );
}

#[tokio::test]
async fn supabase_mode_refuses_a_database_without_supabase_auth() {
    let db = TestDatabase::create(Flavor::Plain)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PostgresStore::connect(db.url(), Mode::Supabase)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "supabase mode needs the function auth.jwt(); is this a Supabase database?"
    );
}

#[tokio::test]
async fn a_database_provisioned_for_one_mode_is_refused_in_the_other() {
    let db = TestDatabase::create(Flavor::Supabase)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    PostgresStore::connect(db.url(), Mode::Supabase)
        .await
        .unwrap()
        .close()
        .await;
    // The Supabase login role may also connect in RLS mode (it has no BYPASSRLS itself).
    let err = PostgresStore::connect(db.url(), Mode::Rls)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the database was provisioned for mode supabase, not rls"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let err = PostgresStore::connect("postgres://nobody@127.0.0.1:1/none", Mode::Rls)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "could not connect to PostgreSQL");
}

/// Tenant and principal ids travel as quoted literals in each transaction's opening statement:
/// quotes, backslashes and SQL in an id stay data, in both modes.
#[tokio::test]
async fn hostile_ids_stay_data() {
    use forge_core::ports::store::ThreadStore;
    use forge_core::scope::Scope;

    for flavor in [Flavor::Plain, Flavor::Supabase] {
        let (store, _, _) = crate::fresh(flavor, Arc::new(ManualClock::at_2026())).await;
        let hostile = Scope::parse(
            r"x'); SELECT set_config('forge.tenant_id', 'tenant-a', true); --\",
            r"p\'q",
            &[],
        )
        .unwrap();
        let thread = store
            .create_thread(&hostile, NewThread::default())
            .await
            .unwrap();
        assert_eq!(
            store
                .get_thread(&hostile, thread.id)
                .await
                .unwrap()
                .tenant_id,
            *hostile.tenant_id()
        );
        assert!(
            store
                .get_thread(&scope("tenant-a"), thread.id)
                .await
                .is_err(),
            "the hostile id did not switch tenants"
        );
    }
}

/// The text, JSON and full-text columns of the schema that hold `marker`, searched as the
/// superuser (who bypasses RLS), as `table.column`.
async fn holding(conn: &mut PgConnection, marker: &str) -> Vec<String> {
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
         WHERE table_schema = 'public' AND data_type IN ('text', 'jsonb', 'json', 'tsvector', 'character varying')",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let mut found = Vec::new();
    for (table, column) in &columns {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE {column}::text ILIKE '%{marker}%'"
        )))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        if n > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

/// After a thread is erased, no column of any table holds what its runs said, and the rows
/// keyed by its runs are gone but for the tenant's model calls (unlinked, no content).
#[tokio::test]
async fn an_erased_thread_leaves_its_text_in_no_table() {
    use forge_core::ports::erasure::{DataErasure, Erase};
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let a = scope("tenant-a");
    let marker = "wombatmarker4417";
    let store = Arc::new(store);
    let thread = forge_testkit::erasure::finished_thread::<crate::Postgres>(
        store.clone(),
        clock,
        a.clone(),
        marker,
    )
    .await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let before = holding(&mut conn, marker).await;
    for column in [
        "forge_messages.parts",
        "forge_runs.input",
        "forge_interactions.body",
    ] {
        assert!(
            before.contains(&column.to_owned()),
            "the search sees {column}: {before:?}"
        );
    }
    let erased = store
        .erase(&a, Erase::Thread(thread), "alice")
        .await
        .unwrap();
    assert_eq!(erased.runs, 2);
    assert_eq!(holding(&mut conn, marker).await, Vec::<String>::new());
    for table in [
        "forge_threads",
        "forge_runs",
        "forge_messages",
        "forge_run_events",
        "forge_interactions",
        "forge_jobs",
    ] {
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(n, 0, "{table} keeps rows of the erased thread");
    }
    let unlinked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM forge_model_calls WHERE run_id = '00000000-0000-0000-0000-000000000000'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(unlinked, 3, "the tenant's calls stay, unlinked");
}

/// After a source is deleted, no column of any table holds its text: every text, JSON and
/// full-text column of the schema is searched, as the superuser (who bypasses RLS).
#[tokio::test]
async fn a_deleted_source_leaves_its_text_in_no_table() {
    let clock = Arc::new(ManualClock::at_2026());
    let (store, _, admin) = crate::fresh(Flavor::Plain, clock.clone()).await;
    let a = scope("tenant-a");
    let marker = "quokkamarker7731";
    let source = forge_rag::ingest::ingest(
        forge_rag::SourceId::new("doomed").unwrap(),
        format!("Title {marker}"),
        "internal",
        forge_rag::Format::Markdown,
        serde_json::json!({"note": marker}),
        &format!(
            "# Heading {marker}\n\n{}",
            format!("The {marker} sentence. ").repeat(200)
        ),
    );
    forge_rag::SourceStore::put_source(&store, &a, &source)
        .await
        .unwrap();
    let vectors = vec![vec![0.6f32, 0.8]; source.chunks.len()];
    assert!(
        forge_rag::SourceStore::put_vectors(
            &store,
            &a,
            &source.id,
            &source.version,
            "test:model",
            &vectors
        )
        .await
        .unwrap()
    );
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    // Every table keyed by a source: none may keep a row of the deleted one.
    let keyed: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name LIKE 'forge_%'
           AND (column_name = 'source_id' OR (column_name = 'id' AND table_name = 'forge_sources'))",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(keyed.len() >= 3, "{keyed:?}");
    async fn rows_of(conn: &mut PgConnection, keyed: &[(String, String)]) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for (table, column) in keyed {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {table} WHERE {column} = 'doomed'"
            )))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            out.push((table.clone(), n));
        }
        out
    }
    assert!(
        rows_of(&mut conn, &keyed).await.iter().all(|(_, n)| *n > 0),
        "each source-keyed table holds the source before deletion"
    );
    let before = holding(&mut conn, marker).await;
    assert!(
        before.contains(&"forge_chunks.tsv".to_owned())
            && before.contains(&"forge_sources.text".to_owned()),
        "the search sees the stored text: {before:?}"
    );
    assert!(
        forge_rag::SourceStore::delete_source(&store, &a, &source.id, "alice")
            .await
            .unwrap()
    );
    assert_eq!(holding(&mut conn, marker).await, Vec::<String>::new());
    for (table, n) in rows_of(&mut conn, &keyed).await {
        assert_eq!(n, 0, "{table} keeps rows of the deleted source");
    }
}

/// Under Supabase's default privileges (whatever its login role creates in `public` is granted
/// to `anon`, `authenticated` and `service_role`), neither `anon` nor `authenticated` holds any
/// privilege on any Forge table or sequence, old or new (issue 73, item 4), nor may execute a
/// Forge function that runs with its owner's rights.
#[tokio::test]
async fn supabase_users_hold_no_privilege_on_any_forge_object() {
    let clock = Arc::new(ManualClock::at_2026());
    let (_store, _url, admin) = crate::fresh(Flavor::Supabase, clock).await;
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    let relations: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, c.relkind::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'public' AND c.relname LIKE 'forge\\_%' AND c.relkind IN ('r', 'p', 'S')",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(
        relations.iter().any(|(r, _)| r == "forge_files")
            && relations.iter().any(|(_, k)| k == "S"),
        "the newer tables and the sequences are looked at: {relations:?}"
    );
    let mut open = Vec::new();
    for role in ["anon", "authenticated"] {
        for (relation, kind) in &relations {
            let privileges = if kind == "S" {
                "USAGE, SELECT, UPDATE"
            } else {
                "SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"
            };
            let check = if kind == "S" {
                "SELECT has_sequence_privilege($1, $2, $3)"
            } else {
                "SELECT has_table_privilege($1, $2, $3)"
            };
            let held: bool = sqlx::query_scalar(check)
                .bind(role)
                .bind(relation)
                .bind(privileges)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            if held {
                open.push(format!("{role} on {relation}"));
            }
        }
        let definers: Vec<String> = sqlx::query_scalar(
            "SELECT p.oid::regprocedure::text FROM pg_proc p \
             JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'public' AND p.proname LIKE 'forge\\_%' AND p.prosecdef \
             AND has_function_privilege($1, p.oid, 'EXECUTE')",
        )
        .bind(role)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        open.extend(
            definers
                .into_iter()
                .map(|f| format!("{role} may execute {f}")),
        );
    }
    assert!(open.is_empty(), "open to Supabase's users: {open:?}");
}
