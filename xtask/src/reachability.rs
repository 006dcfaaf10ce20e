//! Reachability: nothing built is left unplugged.
//!
//! Checked on a call graph of the non-test code parsed with `syn` ([`crate::graph`]), from the
//! roots of each consuming scope — the platform (the public methods of `Engine`,
//! `EngineBuilder`, `Worker` and `Server`), the shipped binaries (`main` of `forge-cli`) and
//! host applications (`main` under `examples/`):
//!
//! - every `RunEventKind` variant and every `Part` variant is constructed in code some root
//!   reaches (a match arm or `matches!` is not a construction), and each event has a row in
//!   ARCHITECTURE.md;
//! - every capability of [`CAPABILITIES`] is provided by the named function, called from the
//!   named wiring site, and that site is reachable from its scope's roots (a GraphQL object's
//!   resolvers are reached once reached code builds a value of its type) — so deleting the call
//!   (keeping its `use`), or leaving the function called only by a wrapper nobody calls, fails;
//! - every port trait has a production implementation that the binaries construct at a named
//!   site ([`PORTS`]), or an entry in [`PENDING`] saying which issue wires it.

use std::collections::BTreeSet;
use std::path::Path;

use crate::graph::{FnId, Graph};
use crate::{crate_dirs, rust_files};

/// Who must consume a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The engine, worker and server: reachable from their public methods.
    Platform,
    /// The shipped `forge` binary: reachable from its `main`.
    Binaries,
    /// A host application: reachable from a `main` under `examples/`.
    Host,
}

/// A function: the file it is in (a path suffix), its owner (`impl` type or trait) and name.
pub(crate) type Site = (&'static str, Option<&'static str>, &'static str);

/// A declared capability.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capability {
    /// What it is.
    pub name: &'static str,
    /// The function that provides it.
    pub provider: Site,
    /// Who must consume it.
    pub scope: Scope,
    /// The function whose body calls the provider.
    pub wired_in: Site,
}

/// The capabilities users were promised, and where each is plugged in.
pub(crate) const CAPABILITIES: &[Capability] = &[
    Capability {
        name: "approvals: a call that needs a person parks the run",
        provider: ("forge-engine/src/hitl.rs", Some("ApprovalGate"), "gate"),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/step.rs", Some("StepRunner"), "act"),
    },
    Capability {
        name: "questions: the built-in ask_user tool",
        provider: ("forge-engine/src/hitl.rs", None, "ask_user_tool"),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/engine/builder.rs",
            Some("EngineBuilder"),
            "register_built_ins",
        ),
    },
    Capability {
        name: "citations: cite calls checked against retrieved spans",
        provider: ("forge-engine/src/cite.rs", Some("Cite"), "new"),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/engine/builder.rs",
            Some("EngineBuilder"),
            "register_built_ins",
        ),
    },
    Capability {
        name: "citations: a passed citation is kept beside its result",
        provider: ("forge-engine/src/cite.rs", None, "citation_of"),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/executor.rs", Some("ToolExecutor"), "one"),
    },
    Capability {
        name: "citations: the binaries give the engine a citation check",
        provider: (
            "forge-engine/src/engine/builder.rs",
            Some("EngineBuilder"),
            "citations",
        ),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/compose.rs", Some("AccessArgs"), "apply"),
    },
    Capability {
        name: "usage recording: every model call reserved before it is made",
        provider: ("forge-engine/src/meter.rs", Some("Meter"), "reserve"),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/step.rs", Some("StepRunner"), "call_model"),
    },
    Capability {
        name: "usage recording: every summarising call reserved before it is made",
        provider: ("forge-engine/src/meter.rs", Some("Meter"), "reserve"),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/compaction.rs",
            Some("Compactor"),
            "summarise",
        ),
    },
    Capability {
        name: "compaction: a step over the agent's budget compacts the thread first",
        provider: (
            "forge-engine/src/compaction.rs",
            Some("Compactor"),
            "compact",
        ),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/step.rs", Some("StepRunner"), "step"),
    },
    Capability {
        name: "compaction: a compaction asked for runs as a queued run",
        provider: (
            "forge-engine/src/compaction.rs",
            Some("Compactor"),
            "compact",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/engine/run_loop.rs",
            Some("Engine"),
            "compaction_run",
        ),
    },
    Capability {
        name: "compaction: asked for through the API",
        provider: (
            "forge-engine/src/engine/mod.rs",
            Some("Engine"),
            "compact_thread",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/mutation.rs",
            Some("Mutation"),
            "compact_thread",
        ),
    },
    Capability {
        name: "compaction: asked for from the CLI",
        provider: ("forge-cli/src/threads.rs", None, "threads"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/main.rs", None, "dispatch"),
    },
    Capability {
        name: "bounded reads: a thread's messages paged through the API",
        provider: ("forge-server/src/schema/paging.rs", None, "messages"),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/objects.rs",
            Some("ThreadObject"),
            "messages",
        ),
    },
    Capability {
        name: "bounded reads: a thread's runs paged through the API",
        provider: ("forge-server/src/schema/paging.rs", None, "runs"),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/objects.rs",
            Some("ThreadObject"),
            "runs",
        ),
    },
    Capability {
        name: "bounded reads: pending interactions paged through the API",
        provider: (
            "forge-engine/src/engine/interactions.rs",
            Some("Engine"),
            "pending_interactions_page",
        ),
        scope: Scope::Platform,
        wired_in: ("forge-server/src/schema/paging.rs", None, "pending"),
    },
    Capability {
        name: "compaction: context assembly reads only what follows the summary, in pages",
        provider: ("forge-engine/src/compaction.rs", None, "continue_history"),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/engine/run_loop.rs",
            Some("Engine"),
            "read_thread",
        ),
    },
    Capability {
        name: "output_schema: structured answers validated",
        provider: (
            "forge-engine/src/step.rs",
            Some("StepRunner"),
            "structured_answer",
        ),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/step.rs", Some("StepRunner"), "act"),
    },
    Capability {
        name: "session state: the built-in update_session_state tool",
        provider: ("forge-engine/src/state.rs", Some("UpdateState"), "new"),
        scope: Scope::Platform,
        wired_in: (
            "forge-engine/src/engine/builder.rs",
            Some("EngineBuilder"),
            "register_built_ins",
        ),
    },
    Capability {
        name: "session state: a step's change committed with the step",
        provider: ("forge-engine/src/state.rs", Some("Draft"), "finish"),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/step.rs", Some("StepRunner"), "run_tools"),
    },
    Capability {
        name: "session state: a host's versioned update through the API",
        provider: (
            "forge-engine/src/engine/mod.rs",
            Some("Engine"),
            "update_thread_state",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/mutation.rs",
            Some("Mutation"),
            "update_thread_state",
        ),
    },
    Capability {
        name: "one worker of a fleet sweeps, elected by lease",
        provider: (
            "forge-engine/src/worker/mod.rs",
            Some("Worker"),
            "with_sweep_leases",
        ),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/main.rs", None, "worker"),
    },
    Capability {
        name: "erasure through the API",
        provider: ("forge-engine/src/engine/mod.rs", Some("Engine"), "erase"),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/mutation.rs",
            Some("Mutation"),
            "erase_run",
        ),
    },
    Capability {
        name: "telemetry exported over OTLP",
        provider: ("forge-otel/src/lib.rs", Some("Otel"), "otlp"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/telemetry.rs", Some("TelemetryArgs"), "start"),
    },
    Capability {
        name: "live tail across processes on Redis",
        provider: (
            "forge-store-redis/src/live.rs",
            Some("RedisLivePublisher"),
            "connect",
        ),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/live.rs", Some("LiveArgs"), "publisher"),
    },
    Capability {
        name: "retrieval: the search_documents tool",
        provider: ("forge-rag/src/tool.rs", Some("SearchDocuments"), "new"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/compose.rs", Some("AccessArgs"), "apply"),
    },
    Capability {
        name: "threads: the caller's threads a page at a time",
        provider: ("forge-server/src/schema/paging.rs", None, "threads"),
        scope: Scope::Platform,
        wired_in: ("forge-server/src/schema/query.rs", Some("Query"), "threads"),
    },
    Capability {
        name: "threads: renamed and archived through the API",
        provider: (
            "forge-engine/src/engine/mod.rs",
            Some("Engine"),
            "update_thread",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/mutation.rs",
            Some("Mutation"),
            "update_thread",
        ),
    },
    Capability {
        name: "threads: deleted by their creator",
        provider: (
            "forge-server/src/schema/mutation.rs",
            None,
            "erase_whole_thread",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/mutation.rs",
            Some("Mutation"),
            "delete_thread",
        ),
    },
    Capability {
        name: "the caller's pending approvals, live",
        provider: (
            "forge-server/src/schema/subscription.rs",
            None,
            "pending_lists",
        ),
        scope: Scope::Platform,
        wired_in: (
            "forge-server/src/schema/subscription.rs",
            Some("Subscriptions"),
            "pending_interactions",
        ),
    },
    Capability {
        name: "the web client served at /",
        provider: ("forge-server/src/web.rs", None, "ui"),
        scope: Scope::Platform,
        wired_in: ("forge-server/src/lib.rs", Some("Server"), "router"),
    },
    Capability {
        name: "CORS for the configured origins",
        provider: ("forge-server/src/web.rs", None, "cors"),
        scope: Scope::Platform,
        wired_in: ("forge-server/src/lib.rs", Some("Server"), "router"),
    },
    Capability {
        name: "development sign-in when enabled",
        provider: ("forge-cli/src/serve.rs", Some("BrowserArgs"), "config"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/serve.rs", None, "serve"),
    },
    Capability {
        name: "evaluation: forge eval scores a dataset through the engine",
        provider: ("forge-eval/src/harness.rs", Some("Harness"), "score"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/eval/mod.rs", None, "score_dataset"),
    },
    Capability {
        name: "evaluation: code graders over the run's recorded structure",
        provider: ("forge-eval/src/grade.rs", None, "grade"),
        scope: Scope::Binaries,
        wired_in: ("forge-eval/src/harness.rs", Some("Harness"), "grade"),
    },
    Capability {
        name: "evaluation: the model judge with its durable cache",
        provider: ("forge-eval/src/judge.rs", Some("Judge"), "new"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/eval/mod.rs", None, "score_dataset"),
    },
    Capability {
        name: "evaluation: the regression report between two scoring runs",
        provider: ("forge-eval/src/compare.rs", None, "compare"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/eval/mod.rs", None, "compare"),
    },
    Capability {
        name: "release gate: forge gate decides with evaluate_gate",
        provider: ("forge-eval/src/gate.rs", None, "evaluate_gate"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/gate.rs", None, "gate"),
    },
    Capability {
        name: "evaluation: recovery cases kill the executing worker",
        provider: ("forge-cli/src/eval/faults.rs", Some("KillSwitch"), "new"),
        scope: Scope::Binaries,
        wired_in: ("forge-cli/src/eval/runner.rs", Some("EngineRunner"), "run"),
    },
    // Host applications: what an application embedding Forge needs, used by one under
    // `examples/` (ShareFlow, the CRM) through the published crates only.
    Capability {
        name: "embedding: a host composes an engine with its own tools, agents and policies",
        provider: ("forge/src/builder.rs", Some("ForgeBuilder"), "build"),
        scope: Scope::Host,
        wired_in: ("shareflow/src/app.rs", Some("ShareFlow"), "start"),
    },
    Capability {
        name: "embedding: a host's own function as a tool",
        provider: ("forge-engine/src/tools.rs", None, "native_tool"),
        scope: Scope::Host,
        wired_in: ("shareflow/src/app.rs", Some("ShareFlow"), "start"),
    },
    Capability {
        name: "embedding: a host submits runs",
        provider: ("forge-engine/src/engine/mod.rs", Some("Engine"), "submit"),
        scope: Scope::Host,
        wired_in: (
            "shareflow/src/workflow.rs",
            Some("Documents"),
            "start_drafting",
        ),
    },
    Capability {
        name: "embedding: a host's deployment runs a durable worker",
        provider: ("forge-engine/src/worker/mod.rs", Some("Worker"), "run"),
        scope: Scope::Host,
        wired_in: ("forge/src/deployment.rs", Some("Forge"), "start_worker"),
    },
    Capability {
        name: "embedding: a host resolves an approval",
        provider: (
            "forge-engine/src/engine/interactions.rs",
            Some("Engine"),
            "resolve_interaction",
        ),
        scope: Scope::Host,
        wired_in: ("shareflow/src/bin/shareflow.rs", None, "approve"),
    },
    Capability {
        name: "retrieval: a host indexes its own documents for search and citations",
        provider: ("forge-rag/src/retrieve.rs", Some("Retriever"), "index"),
        scope: Scope::Host,
        wired_in: ("shareflow/src/app.rs", Some("ShareFlow"), "drop_document"),
    },
    Capability {
        name: "policies: a host loads its own Cedar policies",
        provider: (
            "forge-policy/src/lib.rs",
            Some("CedarAuthorizer"),
            "from_sources",
        ),
        scope: Scope::Host,
        wired_in: ("shareflow/src/app.rs", Some("ShareFlow"), "start"),
    },
    Capability {
        name: "server: a host serves its own routes beside Forge's API and web client",
        provider: ("forge-server/src/lib.rs", Some("Server"), "serve_with"),
        scope: Scope::Host,
        wired_in: ("shareflow/src/run.rs", Some("Running"), "start"),
    },
    Capability {
        name: "server: a host authenticates its own routes with Forge's tokens",
        provider: (
            "forge-server/src/lib.rs",
            Some("Authenticator"),
            "authenticate_request",
        ),
        scope: Scope::Host,
        wired_in: (
            "forge-server/src/app.rs",
            Some("Caller"),
            "from_request_parts",
        ),
    },
    Capability {
        name: "MCP: a host imports its own MCP server's pinned tools",
        provider: ("forge-mcp/src/lib.rs", Some("McpRuntime"), "start"),
        scope: Scope::Host,
        wired_in: ("crm/src/app.rs", None, "import_tools"),
    },
    Capability {
        name: "MCP: a host offers the imported tools to its engine",
        provider: ("forge-mcp/src/lib.rs", Some("McpRuntime"), "tools"),
        scope: Scope::Host,
        wired_in: ("crm/src/app.rs", Some("Crm"), "start"),
    },
    Capability {
        name: "facade: an embedder waits for a run its deployment started",
        provider: ("forge/src/run.rs", Some("RunHandle"), "wait"),
        scope: Scope::Host,
        wired_in: ("embed/src/main.rs", None, "main"),
    },
    Capability {
        name: "facade: an embedder serves GraphQL over its deployment",
        provider: ("forge/src/deployment.rs", Some("Forge"), "serve"),
        scope: Scope::Host,
        wired_in: ("graphql/src/main.rs", None, "main"),
    },
    Capability {
        name: "PostgreSQL: a host sets up its own role and database with row-level security",
        provider: (
            "forge-store-postgres/src/application.rs",
            None,
            "provision_application",
        ),
        scope: Scope::Host,
        wired_in: ("shareflow/src/run.rs", Some("Running"), "start"),
    },
];

/// A port trait, the production type implementing it, and the binaries' function that builds it.
pub(crate) const PORTS: &[(&str, &str, Site)] = &[
    (
        "ThreadStore",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "RunStore",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "Store",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "JobQueue",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "InteractionStore",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "UsageLedger",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "AuditLog",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "DataErasure",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "RequestKeys",
        "PostgresStore",
        ("forge/src/stores.rs", Some("Stores"), "open_postgres"),
    ),
    (
        "SourceStore",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "FileStore",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "EvalStore",
        "SqliteStore",
        ("forge/src/stores.rs", Some("Stores"), "open"),
    ),
    (
        "CaseRunner",
        "EngineRunner",
        ("forge-cli/src/eval/mod.rs", None, "score_dataset"),
    ),
    (
        "ModelProvider",
        "HttpProvider",
        (
            "forge-providers/src/config.rs",
            Some("ProvidersConfig"),
            "provider",
        ),
    ),
    (
        "Tool",
        "McpTool",
        ("forge-mcp/src/lib.rs", Some("McpRuntime"), "start"),
    ),
    (
        "Authorizer",
        "CedarAuthorizer",
        ("forge-cli/src/compose.rs", Some("AccessArgs"), "authorizer"),
    ),
    (
        "CitationCheck",
        "Retriever",
        (
            "forge-cli/src/embedder.rs",
            Some("EmbedderArgs"),
            "retriever",
        ),
    ),
    (
        "FileContents",
        "Files",
        ("forge-cli/src/files.rs", Some("FilesArgs"), "files"),
    ),
    (
        "BlobStore",
        "FsBlobStore",
        ("forge-cli/src/files.rs", Some("FilesArgs"), "blobs"),
    ),
    (
        "SessionDraft",
        "StepDraft",
        ("forge-engine/src/step.rs", Some("StepRunner"), "run_tools"),
    ),
    (
        "Scanner",
        "ClamdScanner",
        ("forge-cli/src/files.rs", Some("FilesArgs"), "files"),
    ),
    (
        "Embedder",
        "MiniLm",
        ("forge-cli/src/embedder.rs", None, "local"),
    ),
    (
        "LiveSink",
        "RedisLivePublisher",
        ("forge-cli/src/live.rs", Some("LiveArgs"), "publisher"),
    ),
    (
        "Tracer",
        "Otel",
        ("forge-cli/src/telemetry.rs", Some("TelemetryArgs"), "start"),
    ),
    (
        "Meter",
        "Otel",
        ("forge-cli/src/telemetry.rs", Some("TelemetryArgs"), "start"),
    ),
    (
        "Logger",
        "JsonLines",
        ("forge-cli/src/telemetry.rs", None, "stderr_logger"),
    ),
    (
        "ApprovalRule",
        "CedarAuthorizer",
        ("forge-cli/src/compose.rs", Some("AccessArgs"), "apply"),
    ),
    (
        "ApprovalPreviewer",
        "PreviewTemplate",
        ("forge-mcp/src/lib.rs", Some("McpRuntime"), "start"),
    ),
    (
        "LeaseStore",
        "RedisLeaseStore",
        ("forge-cli/src/leases.rs", Some("LeaseArgs"), "sweep_leases"),
    ),
];

/// Declared ports and capabilities not plugged in yet, each with the issue that plugs it.
pub(crate) const PENDING: &[(&str, &str)] = &[];

/// Where the port traits are declared.
const PORT_FILES: &[&str] = &[
    "crates/forge-core/src/ports",
    "crates/forge-rag/src/ports.rs",
    "crates/forge-rag/src/embed.rs",
    "crates/forge-files/src/ports.rs",
    "crates/forge-eval/src/ports.rs",
    "crates/forge-eval/src/harness.rs",
];

/// The tree's non-test sources, relative to `root`: every crate's `src` but the test kit's,
/// the benchmarks' and xtask's, and `examples/*/src`.
pub(crate) fn sources(root: &Path) -> Vec<(String, String)> {
    let mut dirs: Vec<_> = crate_dirs(root)
        .into_iter()
        .filter(|d| {
            !d.ends_with("forge-testkit") && !d.ends_with("forge-bench") && !d.ends_with("xtask")
        })
        .map(|d| d.join("src"))
        .collect();
    if let Ok(rd) = std::fs::read_dir(root.join("examples")) {
        dirs.extend(rd.flatten().map(|e| e.path().join("src")));
    }
    dirs.iter()
        .flat_map(|d| rust_files(d))
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f).ok()?;
            let rel = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            Some((rel, text))
        })
        .collect()
}

/// The roots of `scope`.
fn is_root(scope: Scope, id: &FnId, public: bool) -> bool {
    match scope {
        Scope::Platform => {
            public
                && matches!(
                    id.owner.as_deref(),
                    Some(
                        "Engine"
                            | "EngineBuilder"
                            | "Worker"
                            | "Server"
                            | "Query"
                            | "Mutation"
                            | "Subscription"
                    )
                )
                && !id.file.starts_with("examples/")
        }
        Scope::Binaries => {
            id.name == "main" && id.owner.is_none() && id.file.contains("forge-cli/src/main.rs")
        }
        Scope::Host => id.name == "main" && id.owner.is_none() && id.file.starts_with("examples/"),
    }
}

fn site(s: &Site) -> String {
    match s.1 {
        Some(owner) => format!("{owner}::{} ({})", s.2, s.0),
        None => format!("{} ({})", s.2, s.0),
    }
}

/// Everything the module doc lists, on `files` (path relative to the root, text).
pub(crate) fn check_tree(
    files: &[(String, String)],
    capabilities: &[Capability],
    ports: &[(&str, &str, Site)],
    pending: &[(&str, &str)],
) -> Vec<String> {
    let graph = Graph::parse(files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    let mut problems: Vec<String> = graph.errors.clone();
    let reach = |scope| graph.reachable(|id, public| is_root(scope, id, public));
    let platform = reach(Scope::Platform);
    let binaries = reach(Scope::Binaries);
    let host = reach(Scope::Host);
    let scoped = |scope| match scope {
        Scope::Platform => &platform,
        Scope::Binaries => &binaries,
        Scope::Host => &host,
    };
    let anywhere: BTreeSet<usize> = platform.union(&binaries).copied().collect();
    let file = |suffix: &str| {
        files
            .iter()
            .find(|(p, _)| p.ends_with(suffix))
            .map(|(_, t)| t.as_str())
            .unwrap_or_default()
    };

    // Events and parts.
    for (enum_, decl) in [
        ("RunEventKind", "forge-core/src/event.rs"),
        ("Part", "forge-core/src/part.rs"),
    ] {
        let variants = crate::graph::enum_variants(file(decl), enum_);
        if variants.len() < 5 {
            problems.push(format!(
                "found only {} {enum_} variants in {decl}; the parser is broken",
                variants.len()
            ));
        }
        for (variant, _) in &variants {
            let made = graph.constructors(enum_, variant);
            if made.is_disjoint(&anywhere) {
                let unreached: Vec<String> = made
                    .iter()
                    .map(|&i| format!("{:?}::{}", graph.id(i).owner, graph.id(i).name))
                    .collect();
                problems.push(format!(
                    "{enum_}::{variant} is constructed by no code the platform or the binaries \
                     reach (constructed only in: {unreached:?})"
                ));
            }
        }
    }

    // Capabilities.
    for c in capabilities {
        let (pfile, powner, pname) = c.provider;
        if graph.find(pfile, powner, pname).is_empty() {
            problems.push(format!(
                "{}: its provider {} is not defined",
                c.name,
                site(&c.provider)
            ));
            continue;
        }
        let (wfile, wowner, wname) = c.wired_in;
        let sites = graph.find(wfile, wowner, wname);
        if sites.is_empty() {
            problems.push(format!(
                "{}: its wiring site {} is not defined",
                c.name,
                site(&c.wired_in)
            ));
            continue;
        }
        if !sites.iter().any(|&i| graph.uses(i, powner, pname)) {
            problems.push(format!(
                "{}: {} does not call {}",
                c.name,
                site(&c.wired_in),
                site(&c.provider)
            ));
            continue;
        }
        if !sites.iter().any(|i| scoped(c.scope).contains(i)) {
            problems.push(format!(
                "{}: {} is not reachable from the {:?} roots",
                c.name,
                site(&c.wired_in),
                c.scope
            ));
        }
    }

    // Ports.
    let declared: Vec<String> = files
        .iter()
        .filter(|(p, _)| PORT_FILES.iter().any(|d| p.starts_with(d)))
        .flat_map(|(_, t)| crate::graph::traits(t))
        .collect();
    if declared.len() < 10 {
        problems.push(format!(
            "found only {} port traits; the parser is broken",
            declared.len()
        ));
    }
    for port in &declared {
        let wired = ports.iter().find(|(p, _, _)| p == port);
        let waiting = pending.iter().any(|(p, _)| p == port);
        match (wired, waiting) {
            (None, false) => problems.push(format!(
                "port {port} has no production implementation wired in the binaries (PORTS) \
                 and no entry in PENDING"
            )),
            (Some(_), true) => {
                problems.push(format!("port {port} is wired; remove it from PENDING"))
            }
            (None, true) => {}
            (Some((_, ty, at)), false) => {
                if !graph.implements(port, ty) {
                    problems.push(format!("port {port}: {ty} does not implement it"));
                }
                let sites = graph.find(at.0, at.1, at.2);
                if !sites.iter().any(|&i| graph.names_type(i, ty)) {
                    problems.push(format!("port {port}: {} does not construct {ty}", site(at)));
                } else if !sites.iter().any(|i| binaries.contains(i)) {
                    problems.push(format!(
                        "port {port}: {} is not reachable from the binaries",
                        site(at)
                    ));
                }
            }
        }
    }
    for (name, _) in pending {
        if !declared.iter().any(|d| d == name) && !capabilities.iter().any(|c| c.name == *name) {
            problems.push(format!(
                "PENDING names {name}, which is no port or capability"
            ));
        }
    }
    problems
}

/// Checks the tree, and that every event has a row in ARCHITECTURE.md.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let files = sources(root);
    let mut problems = check_tree(&files, CAPABILITIES, PORTS, PENDING);
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let event_rs =
        std::fs::read_to_string(root.join("crates/forge-core/src/event.rs")).unwrap_or_default();
    for (variant, wire) in crate::graph::enum_variants(&event_rs, "RunEventKind") {
        let wire = wire.unwrap_or(variant);
        if !architecture.contains(&format!("`{wire}`")) {
            problems.push(format!(
                "ARCHITECTURE.md has no row for `{wire}` and its producer"
            ));
        }
    }
    crate::verdict(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> Vec<(String, String)> {
        files
            .iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect()
    }

    fn about<'a>(problems: &'a [String], what: &str) -> Vec<&'a String> {
        problems.iter().filter(|p| p.contains(what)).collect()
    }

    const COMPACTION: Capability = Capability {
        name: "compaction",
        provider: ("forge-engine/src/compact.rs", None, "compact"),
        scope: Scope::Platform,
        wired_in: ("forge-engine/src/compact.rs", None, "maybe_compact"),
    };

    const COMPACT_RS: &str = "
        pub fn maybe_compact(n: usize) { if n > 10 { compact(); } }
        pub fn compact() {}
        // A wrapper nobody calls.
        pub fn compact_everything() { maybe_compact(usize::MAX); }
    ";

    fn engine(step_body: &str) -> String {
        format!(
            "pub struct Engine; impl Engine {{ pub fn execute(&self) {{ StepRunner.step(); }} }}
             struct StepRunner; impl StepRunner {{ fn step(&self) {{ {step_body} }} }}"
        )
    }

    fn check_compaction(step_body: &str) -> Vec<String> {
        let engine = engine(step_body);
        let files = tree(&[
            ("crates/forge-engine/src/compact.rs", COMPACT_RS),
            ("crates/forge-engine/src/engine.rs", &engine),
        ]);
        check_tree(&files, &[COMPACTION], &[], &[])
    }

    #[test]
    fn the_tree_is_wired() {
        crate::assert_clean("reachability", check(&crate::root()));
    }

    #[test]
    fn a_handlers_extractor_is_called_by_the_handler() {
        const CALLER: Capability = Capability {
            name: "the caller",
            provider: (
                "forge-engine/src/app.rs",
                Some("Caller"),
                "from_request_parts",
            ),
            scope: Scope::Platform,
            wired_in: ("forge-engine/src/app.rs", None, "handler"),
        };
        let check = |param: &str| {
            let app = format!(
                "pub struct Caller(u8);
                 impl Caller {{ fn from_request_parts() {{}} }}
                 pub fn route() {{ handler }}
                 async fn handler({param}) {{}}"
            );
            let engine = engine("crate::app::route();");
            let files = tree(&[
                ("crates/forge-engine/src/app.rs", &app),
                ("crates/forge-engine/src/engine.rs", &engine),
            ]);
            check_tree(&files, &[CALLER], &[], &[])
        };
        let wired = check("Caller(scope): Caller");
        assert!(about(&wired, "the caller").is_empty(), "{wired:?}");
        let unwired = check("scope: u8");
        assert_eq!(about(&unwired, "the caller").len(), 1, "{unwired:?}");
    }

    #[test]
    fn an_object_resolver_is_reached_once_reached_code_builds_its_object() {
        const PAGING: Capability = Capability {
            name: "paging",
            provider: ("forge-server/src/paging.rs", None, "messages"),
            scope: Scope::Platform,
            wired_in: (
                "forge-server/src/objects.rs",
                Some("ThreadObject"),
                "messages",
            ),
        };
        let paging = "pub(crate) async fn messages() {}";
        let objects = "
            pub struct ThreadObject(u8);
            #[Object(name = \"Thread\")]
            impl ThreadObject {
                async fn messages(&self) { crate::paging::messages().await }
            }
        ";
        let check = |query: &str| {
            let files = tree(&[
                ("crates/forge-server/src/paging.rs", paging),
                ("crates/forge-server/src/objects.rs", objects),
                ("crates/forge-server/src/query.rs", query),
            ]);
            about(&check_tree(&files, &[PAGING], &[], &[]), "paging")
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        let builds = "pub struct Query; #[Object] impl Query { async fn thread(&self) -> ThreadObject { ThreadObject(1) } }";
        assert!(check(builds).is_empty());
        // A query that names the type only in a comment and a string builds nothing.
        let names = "pub struct Query; #[Object] impl Query {
            // ThreadObject(1)
            async fn thread(&self) -> &'static str { \"ThreadObject(1)\" } }";
        assert_eq!(
            check(names),
            [
                "paging: ThreadObject::messages (forge-server/src/objects.rs) is not reachable from the Platform roots"
            ]
        );
    }

    #[test]
    fn a_wired_trigger_passes() {
        let problems = check_compaction("crate::compact::maybe_compact(self.len());");
        assert!(about(&problems, "compaction").is_empty(), "{problems:?}");
    }

    #[test]
    fn an_unwired_trigger_fails_though_an_unused_wrapper_still_calls_it() {
        // The step no longer calls the trigger; `compact_everything` still does, and nothing
        // calls `compact_everything`.
        let problems = check_compaction("let _ = self;");
        assert_eq!(
            about(&problems, "compaction"),
            [
                "compaction: maybe_compact (forge-engine/src/compact.rs) is not reachable from the Platform roots"
            ],
            "{problems:?}"
        );
    }

    #[test]
    fn a_deleted_wiring_call_fails_though_its_import_comment_and_string_remain() {
        let compact = "
            use crate::compact::compact;
            pub fn maybe_compact(n: usize) {
                // compact();
                let why = \"compact() is not called here\";
                let _ = (n, why);
            }
            pub fn compact() {}
        ";
        let engine = engine("crate::compact::maybe_compact(1);");
        let files = tree(&[
            ("crates/forge-engine/src/compact.rs", compact),
            ("crates/forge-engine/src/engine.rs", &engine),
        ]);
        let problems = check_tree(&files, &[COMPACTION], &[], &[]);
        assert_eq!(
            about(&problems, "compaction"),
            [
                "compaction: maybe_compact (forge-engine/src/compact.rs) does not call compact (forge-engine/src/compact.rs)"
            ],
            "{problems:?}"
        );
    }

    #[test]
    fn a_match_arm_or_matches_is_not_a_construction_and_a_method_call_is_a_use() {
        let event = "pub enum RunEventKind { A { x: u8 }, B { x: u8 }, C, D(u8), E }";
        let engine = "
            pub struct Engine;
            impl Engine {
                pub fn execute(&self, k: RunEventKind) {
                    match k { RunEventKind::A { .. } => {} _ => {} }
                    if matches!(k, RunEventKind::B { .. }) {}
                    self.emit_all();
                }
                fn emit_all(&self) {
                    let _ = vec![RunEventKind::C, RunEventKind::D(1)];
                    let _ = RunEventKind::E;
                }
            }
        ";
        let files = tree(&[
            ("crates/forge-core/src/event.rs", event),
            ("crates/forge-engine/src/engine.rs", engine),
        ]);
        let problems = check_tree(&files, &[], &[], &[]);
        let events: Vec<&String> = about(&problems, "RunEventKind::");
        assert_eq!(events.len(), 2, "{problems:?}");
        assert!(events[0].starts_with("RunEventKind::A is constructed by no code"));
        assert!(events[1].starts_with("RunEventKind::B is constructed by no code"));
    }

    /// The real tree with one edit: `from` must occur in `file` exactly once.
    fn real_tree_with(file: &str, from: &str, to: &str) -> Vec<String> {
        let mut files = sources(&crate::root());
        let (_, text) = files
            .iter_mut()
            .find(|(p, _)| p.ends_with(file))
            .unwrap_or_else(|| panic!("{file} is in the tree"));
        assert_eq!(
            text.matches(from).count(),
            1,
            "{from:?} occurs once in {file}"
        );
        *text = text.replace(from, to);
        check_tree(&files, CAPABILITIES, PORTS, PENDING)
    }

    #[test]
    fn removing_the_approval_gate_from_the_step_fails() {
        let problems = real_tree_with(
            "forge-engine/src/step.rs",
            "self\n            .engine\n            .approvals(self.scope, self.agent)\n            .gate(cur, step, prepared)\n            .await",
            "(prepared, Vec::new())",
        );
        assert_eq!(
            problems,
            [
                "approvals: a call that needs a person parks the run: StepRunner::act (forge-engine/src/step.rs) does not call ApprovalGate::gate (forge-engine/src/hitl.rs)"
            ]
        );
    }

    #[test]
    fn dropping_the_citation_check_from_the_binaries_fails() {
        let problems = real_tree_with(
            "forge-cli/src/compose.rs",
            ".citations(Arc::new(retriever))",
            "",
        );
        assert_eq!(about(&problems, "citation check").len(), 1, "{problems:?}");
    }

    #[test]
    fn a_port_nobody_builds_fails() {
        let mut ports: Vec<_> = PORTS.to_vec();
        ports.retain(|(p, _, _)| *p != "Scanner");
        let problems = check_tree(&sources(&crate::root()), CAPABILITIES, &ports, PENDING);
        assert_eq!(
            problems,
            [
                "port Scanner has no production implementation wired in the binaries (PORTS) and no entry in PENDING"
            ]
        );
    }
}
