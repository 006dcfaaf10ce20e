//! `forge gate`: reads the scores (scoring a dataset first, or from a file), the thresholds and
//! the trend; asks `forge_eval::evaluate_gate`; prints; appends the outcome to the trend (also
//! when the gate fails); and sets the exit code. Nothing here decides anything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use forge_eval::gate::{OVERRIDE_ACTOR, OVERRIDE_REASON, trend_entry};
use forge_eval::harness::Scored;
use forge_eval::{GateInput, GateOutcome, Override, Thresholds, Trend, evaluate_gate};

use crate::eval::{ScoreOptions, score_dataset};

/// `forge gate`.
#[derive(Debug, clap::Args)]
pub(crate) struct GateArgs {
    /// Score this dataset through the engine, then gate the scores.
    #[arg(long, conflicts_with = "scores", required_unless_present = "scores")]
    dataset: Option<PathBuf>,
    /// Gate the scores `forge eval run --out FILE` wrote.
    #[arg(long)]
    scores: Option<PathBuf>,
    /// The thresholds.
    #[arg(long, default_value = "evals/thresholds.json")]
    thresholds: PathBuf,
    /// The trend: the baseline is the dataset's newest release in it (passed or overridden), and
    /// the outcome is appended.
    #[arg(long, default_value = "evals/trend.json")]
    trend: PathBuf,
    /// This is the dataset's first release: no baseline is required (and a missing trend file
    /// is started).
    #[arg(long)]
    first_release: bool,
    /// Do not append the outcome to the trend.
    #[arg(long)]
    no_record: bool,
    #[command(flatten)]
    options: ScoreOptions,
    /// Print the gate's report as JSON.
    #[arg(long)]
    json: bool,
}

fn read_trend(path: &Path, first_release: bool) -> anyhow::Result<Trend> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Trend::parse(&text, &path.display().to_string())?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && first_release => Ok(Trend::default()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "the trend {} does not exist: a gate without its history would compare with nothing (pass --first-release to start one)",
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("failed to read the trend {}", path.display())),
    }
}

pub(crate) async fn gate(args: GateArgs) -> anyhow::Result<ExitCode> {
    // Everything that can refuse is read before anything is scored.
    let override_by = Override::from_values(
        std::env::var(OVERRIDE_ACTOR).ok().as_deref(),
        std::env::var(OVERRIDE_REASON).ok().as_deref(),
    )?;
    let thresholds = Thresholds::load(&args.thresholds)?;
    let mut trend = read_trend(&args.trend, args.first_release)?;
    let scores: Scored = match (&args.dataset, &args.scores) {
        (Some(dataset), _) => {
            let (loaded, scored) = score_dataset(dataset, &args.options, !args.json).await?;
            for d in thresholds.ungated(&loaded) {
                eprintln!("warning: dimension {d} of {} has no threshold", loaded.name);
            }
            scored
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "no scores to gate: cannot read {} (write them with `forge eval run DATASET --out {}`)",
                    path.display(),
                    path.display()
                )
            })?;
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not a score file", path.display()))?
        }
        (None, None) => bail!("give --dataset or --scores"),
    };
    let baseline = trend.baseline(&scores.run.dataset).cloned();
    let report = evaluate_gate(GateInput {
        scores: &scores,
        baseline: baseline.as_ref(),
        require_baseline: trend.has_releases() && !args.first_release,
        thresholds: &thresholds,
        override_by: override_by.as_ref(),
    });
    let entry = trend_entry(&scores, &report, &thresholds);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"report": report, "entry": entry}))?
        );
    } else {
        println!(
            "gate of {} v{} ({}), scoring run {}",
            scores.run.dataset, scores.run.dataset_version, scores.run.label, scores.run.id
        );
        print!("{}", forge_eval::report::gate(&report, entry.cost_micros));
    }
    if !args.no_record {
        // Recorded whatever the outcome: a trend of passes only would read as unbroken quality.
        trend.entries.push(entry);
        std::fs::write(&args.trend, trend.render()?)
            .with_context(|| format!("failed to append to the trend {}", args.trend.display()))?;
    }
    Ok(match report.outcome {
        GateOutcome::Pass | GateOutcome::Overridden => ExitCode::SUCCESS,
        GateOutcome::Fail => ExitCode::from(1),
    })
}
