//! `forge interactions`: list, approve, reject and answer the approvals and questions that parked
//! runs wait on. Each decision is resolved once (a repeat with the same `--key` reports the first
//! outcome) and audited with `--actor`.

use std::process::ExitCode;

use anyhow::Context;
use forge_core::id::{InteractionId, RunId};
use forge_core::interaction::{Decision, Interaction, InteractionRequest, Resolve};
use forge_core::scope::Scope;
use forge_engine::Engine;

use crate::ids::IdPrefix;
use crate::records::{DecisionRecord, print_json, print_list};
use crate::store::{self, StoreArgs};

/// Whose interactions, and who acts.
#[derive(Debug, clap::Args)]
pub(crate) struct Who {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant.
    #[arg(long, default_value = "local", env = "FORGE_TENANT")]
    tenant: String,
    /// Who is deciding, for the audit trail (default: $FORGE_ACTOR, then $USER).
    #[arg(long)]
    actor: Option<String>,
    /// Idempotency key: repeating a decision with the same key reports the first outcome
    /// (default: a fresh key, so a second decision is refused).
    #[arg(long)]
    key: Option<String>,
    /// Lets the actor approve an external write in a run they started (off by default).
    #[arg(long = "allow-self-approval", env = "FORGE_ALLOW_SELF_APPROVAL")]
    allow_self_approval: bool,
    /// As JSON: an array of interactions for `list`, the decision for the others.
    #[arg(long)]
    json: bool,
}

/// `forge interactions` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum InteractionsCommand {
    /// List pending interactions (or every interaction of one run).
    #[command(mut_args = crate::help::hide(&[crate::help::DECISION_ONLY]))]
    List {
        #[command(flatten)]
        who: Who,
        /// Only this run's interactions, settled ones included.
        #[arg(long)]
        run: Option<RunId>,
    },
    /// Approve a tool call.
    Approve {
        #[command(flatten)]
        who: Who,
        /// The interaction (its id, or the id's unique beginning).
        id: IdPrefix,
        /// The input hash you reviewed; refused if the call's input is not that one.
        #[arg(long)]
        input_hash: Option<String>,
    },
    /// Refuse a tool call (or decline a question); the model is told.
    Reject {
        #[command(flatten)]
        who: Who,
        /// The interaction (its id, or the id's unique beginning).
        id: IdPrefix,
        /// Why, for the model and the audit trail.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Answer a question with JSON matching its answer schema.
    Answer {
        #[command(flatten)]
        who: Who,
        /// The interaction (its id, or the id's unique beginning).
        id: IdPrefix,
        /// The answer, as JSON (a bare word is taken as a string).
        answer: String,
    },
}

fn describe(i: &Interaction) -> String {
    let what = match &i.request {
        InteractionRequest::Approval {
            tool_name,
            input,
            input_hash,
            ..
        } => format!("approve {tool_name} {input} (input hash {input_hash})"),
        InteractionRequest::Question {
            prompt,
            answer_schema,
            ..
        } => format!("answer {prompt:?} as {answer_schema}"),
    };
    format!(
        "{}  {}  run {}  agent {}@{}  expires {}  {what}",
        i.id,
        i.status.name(),
        i.run_id,
        i.agent.name,
        i.agent.version,
        i.expires_at
    )
}

pub(crate) async fn interactions(command: InteractionsCommand) -> anyhow::Result<ExitCode> {
    let (who, decision, id, input_hash) = match command {
        InteractionsCommand::List { who, run } => return list(who, run).await,
        InteractionsCommand::Approve {
            who,
            id,
            input_hash,
        } => (who, Decision::Approve, id, input_hash),
        InteractionsCommand::Reject { who, id, reason } => {
            (who, Decision::Reject { reason }, id, None)
        }
        InteractionsCommand::Answer { who, id, answer } => {
            let answer = serde_json::from_str(&answer).unwrap_or(serde_json::Value::String(answer));
            (who, Decision::Answer { answer }, id, None)
        }
    };
    let actor = who
        .actor
        .clone()
        .or_else(|| std::env::var("FORGE_ACTOR").ok())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into());
    let (engine, scope) = open(&who, &actor).await?;
    let id = match id.whole::<InteractionId>() {
        Some(id) => id,
        None => id.pick(
            "interaction",
            engine
                .pending_interactions(&scope)
                .await?
                .into_iter()
                .map(|i| i.id),
        )?,
    };
    let req = Resolve {
        id,
        decision,
        actor,
        key: who
            .key
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        input_hash,
    };
    // Not found, refused and already decided each end with their own status (`crate::exit`).
    let r = engine.resolve_interaction(&scope, req).await?;
    let decision = match r.interaction.resolution.as_ref().map(|r| &r.decision) {
        Some(Decision::Approve) => "approved",
        Some(Decision::Reject { .. }) => "rejected",
        _ => "answered",
    };
    if who.json {
        print_json(&DecisionRecord {
            interaction: r.interaction.id.to_string(),
            run: r.interaction.run_id.to_string(),
            decision,
            replayed: r.replayed,
            resumed: r.resumed,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let note = if r.replayed {
        " (already, under this key)"
    } else if r.resumed {
        "; the run resumes"
    } else {
        "; the run waits for its other interactions"
    };
    println!("{decision} {}{note}", r.interaction.id);
    Ok(ExitCode::SUCCESS)
}

async fn open(who: &Who, actor: &str) -> anyhow::Result<(Engine, Scope)> {
    let store = store::open(&who.store).await?.store;
    let engine = Engine::builder()
        .dyn_store(store)
        .allow_self_approval(who.allow_self_approval)
        .build()
        .context("failed to build the engine")?;
    let scope = Scope::parse(&who.tenant, actor, &[]).context("invalid tenant or actor")?;
    Ok((engine, scope))
}

async fn list(who: Who, run: Option<RunId>) -> anyhow::Result<ExitCode> {
    let (engine, scope) = open(&who, "operator").await?;
    let found = match run {
        Some(run) => engine.run_interactions(&scope, run).await?,
        None => engine.pending_interactions(&scope).await?,
    };
    print_list(who.json, &found, "no interactions", describe)?;
    Ok(ExitCode::SUCCESS)
}
