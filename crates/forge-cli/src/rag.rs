//! `forge rag`: ingest documents as retrieval sources, list, show and delete them, and search as a
//! scope would (the same results the `search_documents` tool returns).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use forge_core::ports::policy::{AllowAll, Authorizer};
use forge_policy::CedarAuthorizer;
use forge_rag::ingest::ingest;
use forge_rag::{Format, PutOutcome, SourceId};

use crate::compose::ScopeArgs;
use crate::embedder::EmbedderArgs;
use crate::store::StoreArgs;

/// `forge rag`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum RagCommand {
    /// Ingests files (or directories of `.txt`, `.md` and `.html` files) as sources.
    Ingest {
        #[command(flatten)]
        common: Common,
        /// The access label policies read (`resource.label`).
        #[arg(long, default_value = "internal")]
        label: String,
        /// The source's id, for a single file (by default a file's id is its name, and a file
        /// under a directory's is its path relative to that directory).
        #[arg(long)]
        id: Option<String>,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Lists the tenant's sources.
    #[command(mut_args = crate::help::hide(&[crate::help::EMBEDDER]))]
    List(Common),
    /// Shows a source and its chunks.
    #[command(mut_args = crate::help::hide(&[crate::help::EMBEDDER]))]
    Show {
        #[command(flatten)]
        common: Common,
        /// The source's id.
        id: String,
    },
    /// Computes the vectors sources lack under `--embedder`'s model (after changing models, or
    /// when embedding failed during ingestion).
    Embed(Common),
    /// Deletes a source: its text, chunks, index entries and vectors (audited).
    #[command(mut_args = crate::help::hide(&[crate::help::EMBEDDER]))]
    Delete {
        #[command(flatten)]
        common: Common,
        /// The source's id.
        id: String,
    },
    /// Searches as the scope would: only the sources its policies let it read.
    Search {
        #[command(flatten)]
        common: Common,
        /// Cedar policies (a file or directory); without them every source is readable.
        #[arg(long = "policies", env = "FORGE_POLICIES")]
        policies: Option<PathBuf>,
        /// Most results.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// What to look for.
        query: String,
    },
}

/// What every `forge rag` command takes.
#[derive(Debug, clap::Args)]
pub(crate) struct Common {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    scope: ScopeArgs,
    #[command(flatten)]
    embedder: EmbedderArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The documents under `path`, with the id each gets: its path relative to `path` for a directory,
/// its file name for a file.
fn documents(path: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    if path.is_file() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(vec![(name, path.to_path_buf())]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ["txt", "md", "markdown", "html", "htm"].contains(&e))
            {
                let rel = p
                    .strip_prefix(path)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, p));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Refuses a batch in which two files would get the same id: the second would silently replace
/// the first. Nothing is ingested then.
fn distinct_ids(docs: &[(String, PathBuf)]) -> anyhow::Result<()> {
    let mut seen: std::collections::HashMap<&str, &Path> = std::collections::HashMap::new();
    for (id, path) in docs {
        if let Some(first) = seen.insert(id.as_str(), path) {
            bail!(
                "{} and {} would both be the source `{id}`, and the second would replace the \
                 first; nothing was ingested. Ingest their common directory (ids are then paths \
                 relative to it), or each file on its own with --id",
                first.display(),
                path.display()
            );
        }
    }
    Ok(())
}

/// A title: the first Markdown heading or HTML `<title>`, else the id.
fn title_of(id: &str, format: Format, raw: &str) -> String {
    let found = match format {
        Format::Markdown => raw
            .lines()
            .find(|l| l.starts_with("# "))
            .map(|l| l[2..].trim().to_owned()),
        Format::Html => raw.find("<title>").and_then(|i| {
            raw[i + 7..]
                .find("</title>")
                .map(|e| raw[i + 7..i + 7 + e].trim().to_owned())
        }),
        Format::Text => None,
    };
    found
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| id.to_owned())
}

pub(crate) async fn run(command: RagCommand) -> anyhow::Result<ExitCode> {
    match command {
        RagCommand::Ingest {
            common,
            label,
            id,
            paths,
        } => {
            let scope = common.scope.scope()?;
            let mut docs = Vec::new();
            for p in &paths {
                docs.extend(documents(p)?);
            }
            if docs.is_empty() {
                bail!("no .txt, .md or .html files in the given paths");
            }
            if let Some(id) = id {
                match docs.as_mut_slice() {
                    [(only, _)] => *only = id,
                    _ => bail!("--id names one source: give it a single file"),
                }
            }
            distinct_ids(&docs)?;
            let sources = crate::store::open(&common.store).await?.sources;
            let retriever = common.embedder.retriever(sources, Arc::new(AllowAll))?;
            let bar = if common.json {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new(docs.len() as u64)
            };
            let started = Instant::now();
            let (mut created, mut replaced, mut unchanged, mut chunks, mut vectors) =
                (0, 0, 0, 0, 0);
            let mut report = Vec::new();
            for (id, path) in &docs {
                let raw = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {} as UTF-8 text", path.display()))?;
                let format = Format::from_name(id);
                let source = ingest(
                    SourceId::new(id.replace('\\', "/"))
                        .with_context(|| format!("{}", path.display()))?,
                    title_of(id, format, &raw),
                    label.clone(),
                    format,
                    serde_json::json!({"path": path.display().to_string()}),
                    &raw,
                );
                let indexed = retriever.index(&scope, &source).await.with_context(|| {
                    format!(
                        "{} (stored; `forge rag embed` computes its vectors later)",
                        source.id
                    )
                })?;
                let outcome = indexed.outcome;
                vectors += indexed.vectors;
                match outcome {
                    PutOutcome::Created => created += 1,
                    PutOutcome::Replaced => replaced += 1,
                    PutOutcome::Unchanged => unchanged += 1,
                }
                chunks += source.chunks.len();
                report.push(serde_json::json!({
                    "id": source.id, "version": source.version, "chunks": source.chunks.len(), "outcome": outcome, "vectors": indexed.vectors,
                }));
                bar.inc(1);
            }
            bar.finish_and_clear();
            let secs = started.elapsed().as_secs_f64();
            if common.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                let embedded = match retriever.embedder() {
                    Some(e) => format!(", {vectors} vectors ({})", e.model()),
                    None => String::new(),
                };
                println!(
                    "{} files: {created} new, {replaced} replaced, {unchanged} unchanged; {chunks} chunks{embedded} in {secs:.2} s ({:.0} chunks/s)",
                    docs.len(),
                    chunks as f64 / secs.max(1e-9)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        RagCommand::List(common) => {
            let scope = common.scope.scope()?;
            let sources = crate::store::open(&common.store).await?.sources;
            let list = sources.list_sources(&scope, 10_000).await?;
            if common.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for s in list {
                    println!(
                        "{}\t{}\t{}\t{} chunks\t{}",
                        s.id, s.label, s.version, s.chunks, s.title
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RagCommand::Show { common, id } => {
            let scope = common.scope.scope()?;
            let sources = crate::store::open(&common.store).await?.sources;
            let id = SourceId::new(id)?;
            let Some(source) = sources.source(&scope, &id).await? else {
                bail!("no source {id}");
            };
            let chunks = sources.source_chunks(&scope, &id).await?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"source": source, "chunks": chunks})
                    )?
                );
            } else {
                println!(
                    "{} ({}) {} label {}",
                    source.id, source.title, source.version, source.label
                );
                for c in chunks {
                    println!(
                        "[{}] {}..{}\t{}",
                        c.index,
                        c.start,
                        c.end,
                        c.text.replace('\n', " ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RagCommand::Embed(common) => {
            let scope = common.scope.scope()?;
            let sources = crate::store::open(&common.store).await?.sources;
            let retriever = common.embedder.retriever(sources, Arc::new(AllowAll))?;
            let Some(e) = retriever.embedder() else {
                bail!("forge rag embed needs --embedder (local or openai-compatible:MODEL)");
            };
            let model = e.model().to_owned();
            let embedded = retriever.embed_missing(&scope).await?;
            if common.json {
                println!(
                    "{}",
                    serde_json::json!({"model": model, "embedded": embedded})
                );
            } else {
                println!("{embedded} sources embedded with {model}");
            }
            Ok(ExitCode::SUCCESS)
        }
        RagCommand::Delete { common, id } => {
            let scope = common.scope.scope()?;
            let sources = crate::store::open(&common.store).await?.sources;
            let id = SourceId::new(id)?;
            if !sources
                .delete_source(&scope, &id, scope.principal_id().as_str())
                .await?
            {
                bail!("no source {id}");
            }
            println!("deleted {id}");
            Ok(ExitCode::SUCCESS)
        }
        RagCommand::Search {
            common,
            policies,
            limit,
            query,
        } => {
            let scope = common.scope.scope()?;
            let sources = crate::store::open(&common.store).await?.sources;
            let authorizer: Arc<dyn Authorizer> = match &policies {
                Some(p) => {
                    Arc::new(CedarAuthorizer::from_path(p).context("failed to load policies")?)
                }
                None => Arc::new(AllowAll),
            };
            let found = common
                .embedder
                .retriever(sources, authorizer)?
                .find(&scope, &query, limit)
                .await?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&forge_rag::tool::found_json(&found))?
                );
            } else {
                if let Some(why) = &found.degraded {
                    eprintln!("warning: {why}");
                }
                for h in &found.hits {
                    println!(
                        "{:.3}\t{}@{}\t{}..{}\t{}",
                        h.score,
                        h.chunk.source_id,
                        &h.chunk.version[..h.chunk.version.len().min(19)],
                        h.chunk.start,
                        h.chunk.end,
                        h.chunk.text.replace('\n', " ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
