//! `forge eval`: score a dataset through the real engine, list and show scoring runs, compare
//! two of them case by case.

mod faults;
mod runner;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use forge_core::id::UuidV7Generator;
use forge_core::ports::model::ModelProvider;
use forge_core::scope::Scope;
use forge_core::time::SystemClock;
use forge_eval::harness::Scored;
use forge_eval::{Dataset, EvalStore, Harness, Judge, Progress, ScoringRunId};
use forge_providers::{ProvidersConfig, Script, ScriptedProvider};

use crate::agent_file::{self, ProviderArgs};
use crate::compose::AccessArgs;
use crate::metering::MeteringArgs;
use crate::store::{self, StoreArgs};

/// `forge eval`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum EvalCommand {
    /// Score a dataset: run every case through the engine, grade it, record the scoring run.
    Run(Box<RunArgs>),
    /// Compare two scoring runs case by case: ids in the store, `latest`, or score files.
    Compare(CompareArgs),
    /// List scoring runs, newest first.
    List(ListArgs),
    /// Show a scoring run: its per-dimension table and the cases that did not pass.
    Show(ShowArgs),
    /// Check datasets without running them: every case, every agent file, the judge, the
    /// policies.
    Check {
        /// The datasets.
        #[arg(required = true)]
        datasets: Vec<PathBuf>,
    },
}

/// Where scoring runs live and whose they are.
#[derive(Debug, clap::Args)]
pub(crate) struct Where {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant scoring runs belong to (and cases run in, unless the dataset says).
    #[arg(long, env = "FORGE_EVAL_TENANT", default_value = "eval")]
    tenant: String,
}

impl Where {
    fn scope(&self) -> anyhow::Result<Scope> {
        Scope::parse(&self.tenant, "forge-eval", &[]).context("failed to build the scope")
    }
}

/// `forge eval run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The dataset (TOML or JSON).
    dataset: PathBuf,
    #[command(flatten)]
    options: ScoreOptions,
    /// Print the scoring run and its cases as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// How a dataset is scored (`forge eval run`, `forge gate --dataset`).
#[derive(Debug, clap::Args)]
pub(crate) struct ScoreOptions {
    /// Run a dataset agent from another file: `NAME=PATH` (repeatable).
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// Cases run at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[command(flatten)]
    place: Where,
    #[command(flatten)]
    providers: ProviderArgs,
    #[command(flatten)]
    metering: MeteringArgs,
    #[command(flatten)]
    access: AccessArgs,
    /// The judge model (`provider:model`), instead of the dataset's; `none` for no judge.
    #[arg(long)]
    judge: Option<String>,
    /// What is being scored (a revision, a release).
    #[arg(long, env = "FORGE_EVAL_LABEL", default_value = "local")]
    label: String,
    /// Resume this scoring run: only the cases it has not recorded run.
    #[arg(long)]
    resume: Option<ScoringRunId>,
    /// Also write the scoring run and its cases to this file (JSON).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `forge eval compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// The baseline: a scoring run's id, `latest:DATASET`, or a score file from `--out`.
    baseline: String,
    /// The candidate, the same way.
    candidate: String,
    #[command(flatten)]
    place: Where,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `forge eval list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only this dataset's runs.
    #[arg(long)]
    dataset: Option<String>,
    /// Most runs.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    place: Where,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `forge eval show`.
#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The scoring run, or `latest:DATASET`.
    run: String,
    #[command(flatten)]
    place: Where,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(command: EvalCommand) -> anyhow::Result<ExitCode> {
    match command {
        EvalCommand::Run(args) => score(*args).await,
        EvalCommand::Compare(args) => compare(args).await,
        EvalCommand::List(args) => list(args).await,
        EvalCommand::Show(args) => show(args).await,
        EvalCommand::Check { datasets } => check(&datasets),
    }
}

/// Loads each dataset with everything it names, as `forge eval run` would before running.
fn check(datasets: &[PathBuf]) -> anyhow::Result<ExitCode> {
    for path in datasets {
        let dataset = Dataset::load(path)?;
        for (name, agent) in &dataset.agents {
            agent_file::load(agent)
                .with_context(|| format!("agent {name} of {}", path.display()))?;
        }
        // A scripted judge's script is read; another judge needs credentials only to run.
        if let Some(judge) = dataset
            .judge
            .as_ref()
            .filter(|j| j.model.starts_with("scripted:"))
        {
            judge_provider(&judge.model, &dataset, &ProviderArgs::default())
                .with_context(|| format!("the judge of {}", path.display()))?;
        }
        if let Some(policies) = &dataset.policies {
            forge_policy::CedarAuthorizer::from_path(policies)
                .with_context(|| format!("the policies of {}", path.display()))?;
        }
        println!(
            "{}: {} v{}, {} case(s) over {} dimension(s), valid",
            path.display(),
            dataset.name,
            dataset.version,
            dataset.cases.len(),
            dataset.dimensions().len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The judge model's provider: a `scripted:` judge's script resolves against the dataset's
/// directory; any other through the providers file, like an agent's model.
fn judge_provider(
    model: &str,
    dataset: &Dataset,
    providers: &ProviderArgs,
) -> anyhow::Result<Arc<dyn ModelProvider>> {
    let (prefix, name) = model
        .split_once(':')
        .with_context(|| format!("the judge model must be provider:model, not {model:?}"))?;
    if prefix == "scripted" {
        let dir = dataset.path.parent().unwrap_or(Path::new("."));
        let script = Script::load(&dir.join(name))?;
        return Ok(Arc::new(
            ScriptedProvider::empty().with_script(name, script),
        ));
    }
    let config = match &providers.file {
        Some(path) => ProvidersConfig::load(path)?,
        None => ProvidersConfig::default(),
    };
    config
        .provider(prefix, &|n| std::env::var(n).ok())
        .with_context(|| format!("judge model provider {prefix} cannot be used"))
}

/// Scores the dataset at `path` as `args` say, with a progress bar on a terminal when
/// `progress`.
pub(crate) async fn score_dataset(
    path: &Path,
    args: &ScoreOptions,
    progress: bool,
) -> anyhow::Result<(Dataset, Scored)> {
    let dataset = Dataset::load(path)?;
    let mut paths = dataset.agents.clone();
    for a in &args.agents {
        let (name, path) = a
            .split_once('=')
            .with_context(|| format!("--agent takes NAME=PATH, not {a:?}"))?;
        if !paths.contains_key(name) {
            bail!("--agent {name}: the dataset has no agent {name:?}");
        }
        paths.insert(name.to_owned(), PathBuf::from(path));
    }
    let mut names = BTreeMap::new();
    let mut loaded = Vec::new();
    for (name, path) in &paths {
        let agent = agent_file::load(path)?;
        names.insert(name.clone(), agent.definition.agent.clone());
        if !loaded
            .iter()
            .any(|a: &agent_file::LoadedAgent| a.definition.agent == agent.definition.agent)
        {
            loaded.push(agent);
        }
    }
    let mut access = args.access.clone();
    if access.policies.is_none() {
        access.policies = dataset.policies.clone();
    }
    let opened = store::open(&args.place.store).await?;
    let mcp = crate::mcp::start(access.mcp.as_deref(), Some(opened.store.clone())).await?;
    let models = agent_file::providers(&loaded, &args.providers)?;
    let scope = args.place.scope()?;
    let mut harness = Harness::new(
        opened.evals.clone(),
        scope,
        Arc::new(SystemClock),
        Arc::new(UuidV7Generator),
    )
    .concurrency(args.concurrency);
    let judge_model = match args.judge.as_deref() {
        Some("none") => None,
        Some(m) => Some(m.to_owned()),
        None => dataset.judge.as_ref().map(|j| j.model.clone()),
    };
    if let Some(model) = judge_model {
        let provider = judge_provider(&model, &dataset, &args.providers)?;
        let prices = args.metering.prices()?.unwrap_or_default();
        // A judge without a price is reported, and recorded in the trend, as costing nothing:
        // refused, as an agent's unpriced model is under a cost bound. The scripted judge costs
        // nothing in fact.
        if !model.starts_with("scripted:") && !prices.models.contains_key(&model) {
            anyhow::bail!(
                "the judge model {model} has no price in the price table (--prices FILE): its \
                 calls would be reported as costing nothing"
            );
        }
        harness = harness.judge(Arc::new(Judge::new(
            provider,
            model,
            prices,
            opened.evals.clone(),
        )?));
    }
    let runner = runner::EngineRunner {
        store: opened.store.clone(),
        sources: opened.sources.clone(),
        agents: loaded,
        names,
        providers: args.providers.clone(),
        metering: args.metering.clone(),
        access,
        mcp,
        models,
        ledger: Arc::new(crate::builtin::Ledger::default()),
        tenant: args.place.tenant.clone(),
        workers: Default::default(),
        ingested: Default::default(),
    };
    let bar = if progress {
        indicatif::ProgressBar::new(dataset.cases.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let on_progress = |p: Progress<'_>| match p {
        Progress::Started {
            run,
            total,
            skipped,
        } => {
            bar.set_length(total as u64);
            bar.set_position(skipped as u64);
            bar.set_message(format!("scoring run {}", run.id));
        }
        Progress::Case { done, result, .. } => {
            bar.set_position(done as u64);
            bar.set_message(format!("{} {}", result.case_id, result.verdict.name()));
        }
    };
    let scored = harness
        .score(&dataset, &runner, &args.label, args.resume, &on_progress)
        .await?;
    bar.finish_and_clear();
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&scored)?)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok((dataset, scored))
}

async fn score(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (dataset, scored) = score_dataset(&args.dataset, &args.options, !args.json).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&scored)?);
    } else {
        println!(
            "scoring run {} of {} v{} ({})",
            scored.run.id, dataset.name, dataset.version, scored.run.label
        );
        print!("{}", forge_eval::report::scores(&scored.run));
        let failures = forge_eval::report::failures(&scored.cases);
        if !failures.is_empty() {
            println!("not passed:");
            print!("{failures}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A scoring run and its cases, from the store (an id, or `latest:DATASET`) or a score file.
async fn load(what: &str, evals: &dyn EvalStore, scope: &Scope) -> anyhow::Result<Scored> {
    if let Some(dataset) = what.strip_prefix("latest:") {
        let run = evals
            .latest_scoring(scope, dataset)
            .await?
            .with_context(|| format!("dataset {dataset} has no completed scoring run"))?;
        let cases = evals.case_results(scope, run.id).await?;
        return Ok(Scored { run, cases });
    }
    if let Ok(id) = what.parse::<ScoringRunId>() {
        let run = evals
            .scoring_run(scope, id)
            .await?
            .with_context(|| format!("scoring run {id} not found"))?;
        let cases = evals.case_results(scope, id).await?;
        return Ok(Scored { run, cases });
    }
    let text = std::fs::read_to_string(what)
        .with_context(|| format!("{what} is neither a scoring run id nor a readable score file"))?;
    serde_json::from_str(&text).with_context(|| format!("{what} is not a score file"))
}

async fn compare(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let opened = store::open(&args.place.store).await?;
    let scope = args.place.scope()?;
    let a = load(&args.baseline, opened.evals.as_ref(), &scope).await?;
    let b = load(&args.candidate, opened.evals.as_ref(), &scope).await?;
    let report = forge_eval::compare((&a.run, &a.cases), (&b.run, &b.cases));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", forge_eval::report::comparison(&report));
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let opened = store::open(&args.place.store).await?;
    let scope = args.place.scope()?;
    let runs = opened
        .evals
        .list_scoring(&scope, args.dataset.as_deref(), args.limit)
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(ExitCode::SUCCESS);
    }
    for r in runs {
        let mean = r.totals.map_or_else(
            || "-".to_owned(),
            |t| format!("{:.3}", forge_eval::score::fraction(t.score_ppm)),
        );
        println!(
            "{}\t{}\tv{}\t{}\t{}\t{}\t{mean}",
            r.id,
            r.dataset,
            r.dataset_version,
            r.label,
            r.status.name(),
            r.started_at
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let opened = store::open(&args.place.store).await?;
    let scope = args.place.scope()?;
    let scored = load(&args.run, opened.evals.as_ref(), &scope).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&scored)?);
    } else {
        println!(
            "scoring run {} of {} v{} ({}, {})",
            scored.run.id,
            scored.run.dataset,
            scored.run.dataset_version,
            scored.run.label,
            scored.run.status.name()
        );
        print!("{}", forge_eval::report::scores(&scored.run));
        print!("{}", forge_eval::report::failures(&scored.cases));
    }
    Ok(ExitCode::SUCCESS)
}
