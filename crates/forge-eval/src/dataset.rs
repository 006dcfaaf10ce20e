//! Datasets: versioned files of cases, each an input, the expectations its run must meet and the
//! dimensions it counts toward.
//!
//! A dataset is TOML (or the same shape in JSON) under `evals/`:
//!
//! ```toml
//! name = "core"
//! version = 1
//! agents = { calculator = "../examples/agents/calculator.toml" }
//!
//! [[case]]
//! id = "calc.multiply"
//! dimensions = ["task-completion", "tool-selection"]
//! message = "What is 12 times 7?"
//! expect = [
//!   { kind = "contains", values = ["84"] },
//!   { kind = "tool-called", tool = "calculate", input = { op = "mul" } },
//! ]
//! ```
//!
//! Loading checks every case: unique ids, a known agent, at least one dimension and one
//! expectation, and expectation kinds that exist — a kind no grader knows is an error naming the
//! case, never a case silently skipped. Paths are relative to the dataset file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use forge_core::ports::model::{ModelError, ModelErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::dimension::Dimension;
use crate::error::Error;

/// A loaded, checked dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Its name, stable across versions (`[a-z0-9._-]`).
    pub name: String,
    /// Its version: bump it when a case changes meaning.
    pub version: u32,
    /// What it measures.
    pub description: String,
    /// Agent files by the name cases use, resolved against the dataset's directory.
    pub agents: BTreeMap<String, PathBuf>,
    /// Cedar policies the cases run under (a file or directory), if any.
    pub policies: Option<PathBuf>,
    /// The judge for cases that need one, unless the caller names another.
    pub judge: Option<JudgeSettings>,
    /// What a case does not say itself.
    pub defaults: Defaults,
    /// Retrieval sources ingested, before any case runs, into each tenant the cases use.
    pub sources: Vec<SourceSpec>,
    /// The cases, in file order.
    pub cases: Vec<Case>,
    /// The file it was read from.
    pub path: PathBuf,
    /// `sha256:` over the file and its sources' text: a dataset that changed is a different
    /// instrument.
    pub sha256: String,
}

/// The dataset's judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    /// The judge model, as `provider:model` (a `scripted:` model resolves against the dataset's
    /// directory).
    pub model: String,
}

/// Case settings a dataset sets once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// The tenant cases run in (default: the scoring run's).
    #[serde(default)]
    pub tenant: Option<String>,
    /// Who starts each case's run.
    #[serde(default = "Defaults::principal")]
    pub principal: String,
    /// That principal's roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Who decides approvals the cases ask for.
    #[serde(default)]
    pub reviewer: Reviewer,
    /// Longest a case's run may take before it is graded as it stands, in milliseconds.
    #[serde(default = "Defaults::timeout_ms")]
    pub timeout_ms: u64,
}

impl Defaults {
    fn principal() -> String {
        "eval-user".into()
    }
    fn timeout_ms() -> u64 {
        60_000
    }
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            tenant: None,
            principal: Self::principal(),
            roles: vec![],
            reviewer: Reviewer::default(),
            timeout_ms: Self::timeout_ms(),
        }
    }
}

/// The person who decides a case's approvals (never the run's own initiator: Forge refuses
/// self-approval of external writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reviewer {
    /// Their principal id.
    #[serde(default = "Reviewer::principal")]
    pub principal: String,
    /// Their roles.
    #[serde(default)]
    pub roles: Vec<String>,
}

impl Reviewer {
    fn principal() -> String {
        "eval-reviewer".into()
    }
}

impl Default for Reviewer {
    fn default() -> Self {
        Self {
            principal: Self::principal(),
            roles: vec![],
        }
    }
}

/// A retrieval source the cases may search and cite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its access label, as policies see it.
    #[serde(default = "SourceSpec::label")]
    pub label: String,
    /// The principal it belongs to (`resource.owner`), when it is someone's own.
    #[serde(default)]
    pub owner: Option<String>,
    /// `text`, `markdown` or `html`.
    #[serde(default = "SourceSpec::format")]
    pub format: String,
    /// The file, relative to the dataset.
    pub path: String,
    /// The file's text, read at load.
    #[serde(skip)]
    pub text: String,
}

impl SourceSpec {
    fn label() -> String {
        "public".into()
    }
    fn format() -> String {
        "markdown".into()
    }
}

/// One case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Its id, unique in the dataset (`[A-Za-z0-9._-]`, at most 128).
    pub id: String,
    /// The agent, by its name in the dataset's `agents` (optional when there is one).
    #[serde(default)]
    pub agent: Option<String>,
    /// What it counts toward.
    pub dimensions: Vec<Dimension>,
    /// The user's message.
    pub message: String,
    /// The tenant to run in, instead of the default.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Who starts the run, instead of the default.
    #[serde(default)]
    pub principal: Option<String>,
    /// Their roles, instead of the default.
    #[serde(default)]
    pub roles: Option<Vec<String>>,
    /// The thread's session state before the run.
    #[serde(default)]
    pub state: Option<serde_json::Map<String, Value>>,
    /// What the reviewer does with each approval the run asks for.
    #[serde(default)]
    pub approvals: ApprovalPlan,
    /// Answers to the run's questions, in the order they are asked.
    #[serde(default)]
    pub answers: Vec<Value>,
    /// Failures to inject (recovery cases).
    #[serde(default)]
    pub faults: Faults,
    /// Longest the run may take, instead of the default, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// What the run must show.
    pub expect: Vec<Expectation>,
    /// Why the case exists.
    #[serde(default)]
    pub note: String,
}

/// What the reviewer does with approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPlan {
    /// Nothing: the run is graded while it waits.
    #[default]
    Leave,
    /// Approves each one.
    Approve,
    /// Rejects each one.
    Reject,
}

/// Failures injected into a case's run, to see it still end correctly.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Model calls that fail (provider errors, and network faults: `transport`, `timeout`, or
    /// a stream cut after some chunks).
    #[serde(default)]
    pub model: Vec<ModelFault>,
    /// Tool calls that fail.
    #[serde(default)]
    pub tools: Vec<ToolFault>,
    /// The worker executing the run is killed, and another resumes it.
    #[serde(default)]
    pub kill_worker: Option<KillWorker>,
}

impl Faults {
    /// Whether any fault is configured.
    pub fn any(&self) -> bool {
        !self.model.is_empty() || !self.tools.is_empty() || self.kill_worker.is_some()
    }
}

/// One failing model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFault {
    /// Which call of the run fails, from 1 (retries count as calls).
    pub call: u32,
    /// The failure: `server_error`, `overloaded`, `rate_limited`, `timeout`, `transport`,
    /// `malformed_stream`, `stream_error`, `context_length_exceeded`.
    pub code: String,
    /// Chunks delivered before it (0: the call fails before any output).
    #[serde(default)]
    pub after_chunks: usize,
}

impl ModelFault {
    /// The error this fault injects.
    pub fn error(&self) -> Result<ModelError, String> {
        let kind = match self.code.as_str() {
            "server_error" => ModelErrorKind::Server,
            "overloaded" => ModelErrorKind::Overloaded,
            "rate_limited" => ModelErrorKind::RateLimited { retry_after: None },
            "timeout" => ModelErrorKind::Timeout,
            "transport" => ModelErrorKind::Transport,
            "malformed_stream" => ModelErrorKind::MalformedStream("injected".into()),
            "stream_error" => ModelErrorKind::StreamError {
                message: "injected".into(),
                retryable: false,
            },
            "context_length_exceeded" => ModelErrorKind::ContextLengthExceeded,
            other => return Err(format!("unknown model fault code {other:?}")),
        };
        Ok(kind.into())
    }
}

/// One failing tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFault {
    /// The tool.
    pub tool: String,
    /// Which of its calls fails, from 1.
    pub call: u32,
    /// The failure's message.
    #[serde(default = "ToolFault::message")]
    pub message: String,
}

impl ToolFault {
    fn message() -> String {
        "the service did not answer (injected)".into()
    }
}

/// Kill the executing worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillWorker {
    /// After how many events the first execution emitted.
    pub after_events: u32,
}

/// The status a run must end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndStatus {
    /// Completed with a final answer.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Waiting for an approval.
    WaitingApproval,
    /// Waiting for an answer.
    WaitingQuestion,
}

/// What a case's run must show. The `kind` field names the variant; a kind no grader knows is
/// refused when the dataset loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Expectation {
    /// The assistant's text mentions each value; partial credit for some.
    Contains {
        /// What must be mentioned.
        values: Vec<String>,
        /// Whether case matters.
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The model called the tool.
    ToolCalled {
        /// The tool.
        tool: String,
        /// Fields the call's input must have (a subset match).
        #[serde(default)]
        input: Option<Value>,
        /// Exactly this many calls.
        #[serde(default)]
        times: Option<u32>,
        /// The call must have run (a result from the tool itself), not only been asked for.
        #[serde(default)]
        executed: bool,
    },
    /// The model did not call the tool.
    ToolNotCalled {
        /// The tool.
        tool: String,
        /// Only running counts: the model may ask for it, the platform must not run it.
        #[serde(default)]
        executed_only: bool,
    },
    /// Each call of the tool waited for a person's approval before it ran: read from the
    /// approval part, not from the call.
    RequiresApproval {
        /// The tool.
        tool: String,
    },
    /// The run committed a citation of the source.
    CitesSource {
        /// The source id.
        source: String,
        /// Text the cited excerpt must contain.
        #[serde(default)]
        excerpt: Option<String>,
        /// At least this many citations of it.
        #[serde(default = "one")]
        min: u32,
        /// At most this many (`max = 0` with `min = 0`: it must not be cited at all, say a
        /// source the caller may not read).
        #[serde(default)]
        max: Option<u32>,
    },
    /// The run's structured output validates against the agent's output schema.
    StructuredValid,
    /// The run refused: structurally (a forbidden call, a rejected or required approval), or —
    /// with `prose` — in words, as the judge reads them.
    Refuses {
        /// Whether a refusal in prose counts (needs a judge).
        #[serde(default)]
        prose: bool,
    },
    /// The judge scores the answer against a rubric (domain quality).
    Judged {
        /// What a good answer does.
        rubric: String,
    },
    /// The run's own timings and usage stay within budget.
    Budget {
        /// From start to end, in milliseconds.
        #[serde(default)]
        max_latency_ms: Option<u64>,
        /// From start to the first text, in milliseconds.
        #[serde(default)]
        max_ttft_ms: Option<u64>,
        /// Model cost, in micro-units.
        #[serde(default)]
        max_cost_micros: Option<u64>,
        /// Model tokens, input and output.
        #[serde(default)]
        max_tokens: Option<u64>,
    },
    /// The run ended so (and, for a failure, with this code).
    Ends {
        /// The status.
        status: EndStatus,
        /// The failure code, for `failed`.
        #[serde(default)]
        code: Option<String>,
    },
}

fn one() -> u32 {
    1
}

impl Expectation {
    /// The kind's wire name.
    pub fn kind(&self) -> &'static str {
        match self {
            Expectation::Contains { .. } => "contains",
            Expectation::ToolCalled { .. } => "tool-called",
            Expectation::ToolNotCalled { .. } => "tool-not-called",
            Expectation::RequiresApproval { .. } => "requires-approval",
            Expectation::CitesSource { .. } => "cites-source",
            Expectation::StructuredValid => "structured-valid",
            Expectation::Refuses { .. } => "refuses",
            Expectation::Judged { .. } => "judged",
            Expectation::Budget { .. } => "budget",
            Expectation::Ends { .. } => "ends",
        }
    }

    /// Every kind's wire name.
    pub const KINDS: [&'static str; 10] = [
        "contains",
        "tool-called",
        "tool-not-called",
        "requires-approval",
        "cites-source",
        "structured-valid",
        "refuses",
        "judged",
        "budget",
        "ends",
    ];
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDataset {
    name: String,
    version: u32,
    #[serde(default)]
    description: String,
    agents: BTreeMap<String, String>,
    #[serde(default)]
    policies: Option<String>,
    #[serde(default)]
    judge: Option<JudgeSettings>,
    #[serde(default)]
    defaults: Defaults,
    #[serde(default, rename = "source")]
    sources: Vec<SourceSpec>,
    #[serde(default, rename = "case")]
    cases: Vec<Value>,
}

impl Dataset {
    /// Reads and checks the dataset at `path` (`.toml`, or `.json`).
    pub fn load(path: &Path) -> Result<Dataset, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let is_json = path.extension().is_some_and(|e| e == "json");
        Dataset::parse(&text, is_json, path, &dir, &|p| std::fs::read_to_string(p))
    }

    /// Parses and checks a dataset's text; `origin` names it, `dir` resolves its paths and
    /// `read` reads its sources.
    pub fn parse(
        text: &str,
        is_json: bool,
        origin: &Path,
        dir: &Path,
        read: &dyn Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Dataset, Error> {
        let at = origin.display().to_string();
        let invalid = |m: String| Error::invalid(at.clone(), m);
        let value: Value = if is_json {
            serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
        } else {
            let parsed: toml::Table =
                toml::from_str(text).map_err(|e| invalid(e.message().to_owned()))?;
            serde_json::to_value(parsed).map_err(|e| invalid(e.to_string()))?
        };
        let raw: RawDataset = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        if !valid_name(&raw.name) {
            return Err(invalid(format!(
                "dataset name {:?} must be 1-64 of a-z, 0-9, '.', '_' and '-'",
                raw.name
            )));
        }
        if raw.agents.is_empty() {
            return Err(invalid("the dataset names no agents".into()));
        }
        let mut hasher = Sha256::new();
        hasher.update(text.as_bytes());
        let mut sources = raw.sources;
        let mut source_ids = BTreeSet::new();
        for s in &mut sources {
            if !source_ids.insert(s.id.clone()) {
                return Err(invalid(format!("source {} is listed twice", s.id)));
            }
            if !["text", "markdown", "html"].contains(&s.format.as_str()) {
                return Err(invalid(format!(
                    "source {}: format must be text, markdown or html, not {:?}",
                    s.id, s.format
                )));
            }
            let file = dir.join(&s.path);
            s.text = read(&file).map_err(|e| {
                invalid(format!(
                    "source {}: failed to read {}: {e}",
                    s.id,
                    file.display()
                ))
            })?;
            hasher.update(s.id.as_bytes());
            hasher.update(s.text.as_bytes());
        }
        let agents: BTreeMap<String, PathBuf> = raw
            .agents
            .into_iter()
            .map(|(name, p)| (name, dir.join(p)))
            .collect();
        let mut cases = Vec::with_capacity(raw.cases.len());
        let mut ids = BTreeSet::new();
        for (n, value) in raw.cases.into_iter().enumerate() {
            let label = value
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("case {}", n + 1), |id| format!("case {id}"));
            let mut case = parse_case(value).map_err(|m| invalid(format!("{label}: {m}")))?;
            check_case(&mut case, &agents).map_err(|m| invalid(format!("{label}: {m}")))?;
            if !ids.insert(case.id.clone()) {
                return Err(invalid(format!("{label}: the id is used twice")));
            }
            cases.push(case);
        }
        if cases.is_empty() {
            return Err(invalid("the dataset has no [[case]]".into()));
        }
        Ok(Dataset {
            name: raw.name,
            version: raw.version,
            description: raw.description,
            agents,
            policies: raw.policies.map(|p| dir.join(p)),
            judge: raw.judge,
            defaults: raw.defaults,
            sources,
            cases,
            path: origin.to_path_buf(),
            sha256: format!("sha256:{:x}", hasher.finalize()),
        })
    }

    /// The dimensions its cases count toward.
    pub fn dimensions(&self) -> BTreeSet<Dimension> {
        self.cases
            .iter()
            .flat_map(|c| c.dimensions.iter().copied())
            .collect()
    }

    /// A case by id.
    pub fn case(&self, id: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.id == id)
    }
}

/// Parses one case, naming the expectation that is wrong.
fn parse_case(mut value: Value) -> Result<Case, String> {
    // Expectations are parsed one by one so the error says which, and names an unknown kind.
    let expect = value
        .as_object_mut()
        .and_then(|o| o.remove("expect"))
        .unwrap_or(Value::Array(vec![]));
    let Value::Array(items) = expect else {
        return Err("expect must be a list of expectations".into());
    };
    let mut expectations = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let kind = item.get("kind").and_then(Value::as_str).unwrap_or_default();
        if !Expectation::KINDS.contains(&kind) {
            return Err(format!(
                "expectation {}: no grader knows the kind {kind:?} (kinds: {})",
                i + 1,
                Expectation::KINDS.join(", ")
            ));
        }
        let e: Expectation =
            serde_json::from_value(item).map_err(|e| format!("expectation {}: {e}", i + 1))?;
        expectations.push(e);
    }
    if let Some(o) = value.as_object_mut() {
        o.insert("expect".into(), Value::Array(vec![]));
    }
    let mut case: Case = serde_json::from_value(value).map_err(|e| e.to_string())?;
    case.expect = expectations;
    Ok(case)
}

fn check_case(case: &mut Case, agents: &BTreeMap<String, PathBuf>) -> Result<(), String> {
    if !valid_case_id(&case.id) {
        return Err("the id must be 1-128 of A-Z, a-z, 0-9, '.', '_' and '-'".into());
    }
    match &case.agent {
        Some(a) if !agents.contains_key(a) => {
            return Err(format!("agent {a:?} is not in the dataset's agents"));
        }
        Some(_) => {}
        None if agents.len() == 1 => case.agent = agents.keys().next().cloned(),
        None => return Err("name the agent: the dataset has several".into()),
    }
    if case.dimensions.is_empty() {
        return Err("it counts toward no dimension".into());
    }
    if case.expect.is_empty() {
        return Err("it has no expectations".into());
    }
    if case.message.trim().is_empty() {
        return Err("the message is empty".into());
    }
    for (i, e) in case.expect.iter().enumerate() {
        check_expectation(e).map_err(|m| format!("expectation {} ({}): {m}", i + 1, e.kind()))?;
    }
    for f in &case.faults.model {
        if f.call == 0 {
            return Err("a model fault's call counts from 1".into());
        }
        f.error()?;
    }
    for f in &case.faults.tools {
        if f.call == 0 {
            return Err("a tool fault's call counts from 1".into());
        }
    }
    if case
        .faults
        .kill_worker
        .as_ref()
        .is_some_and(|k| k.after_events == 0)
    {
        return Err("kill_worker.after_events counts from 1".into());
    }
    Ok(())
}

fn check_expectation(e: &Expectation) -> Result<(), String> {
    match e {
        Expectation::Contains { values, .. } if values.is_empty() => Err("values is empty".into()),
        Expectation::Contains { values, .. } if values.iter().any(|v| v.is_empty()) => {
            Err("a value is empty".into())
        }
        Expectation::ToolCalled { input: Some(i), .. } if !i.is_object() => {
            Err("input must be a table of fields".into())
        }
        Expectation::CitesSource {
            min: 0, max: None, ..
        } => Err("min = 0 needs a max".into()),
        Expectation::CitesSource {
            min,
            max: Some(max),
            ..
        } if max < min => Err("max is below min".into()),
        Expectation::Judged { rubric } if rubric.trim().is_empty() => {
            Err("the rubric is empty".into())
        }
        Expectation::Budget {
            max_latency_ms: None,
            max_ttft_ms: None,
            max_cost_micros: None,
            max_tokens: None,
        } => Err(
            "give at least one of max_latency_ms, max_ttft_ms, max_cost_micros, max_tokens".into(),
        ),
        Expectation::Ends {
            status,
            code: Some(_),
        } if *status != EndStatus::Failed => Err("a code goes with status = \"failed\"".into()),
        _ => Ok(()),
    }
}

fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn valid_case_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Dataset, Error> {
        Dataset::parse(
            text,
            false,
            Path::new("evals/t.toml"),
            Path::new("evals"),
            &|p| Ok(format!("text of {}", p.display())),
        )
    }

    const HEAD: &str = "name = \"t\"\nversion = 1\nagents = { calc = \"calc.toml\" }\n";

    #[test]
    fn a_valid_case_loads_with_its_agent_resolved() {
        let d = parse(&format!(
            "{HEAD}[[case]]\nid = \"a\"\ndimensions = [\"task-completion\"]\nmessage = \"hi\"\n\
             expect = [{{ kind = \"contains\", values = [\"x\"] }}]\n"
        ))
        .expect("valid");
        assert_eq!(d.cases[0].agent.as_deref(), Some("calc"));
        assert_eq!(d.agents["calc"], Path::new("evals/calc.toml"));
        assert!(d.sha256.starts_with("sha256:"));
        assert_eq!(d.dimensions().len(), 1);
    }

    #[test]
    fn a_kind_no_grader_knows_is_an_error_naming_the_case() {
        let err = parse(&format!(
            "{HEAD}[[case]]\nid = \"vibes\"\ndimensions = [\"domain-quality\"]\nmessage = \"hi\"\n\
             expect = [{{ kind = \"sentiment\", positive = true }}]\n"
        ))
        .expect_err("unknown kind")
        .to_string();
        assert!(
            err.contains("case vibes: expectation 1: no grader knows the kind \"sentiment\""),
            "{err}"
        );
    }

    #[test]
    fn bad_cases_are_refused_with_the_reason() {
        let case = |body: &str| format!("{HEAD}[[case]]\n{body}\n");
        let cases = [
            (
                case(
                    "id = \"a\"\ndimensions = []\nmessage = \"m\"\nexpect = [{ kind = \"structured-valid\" }]",
                ),
                "counts toward no dimension",
            ),
            (
                case("id = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = []"),
                "has no expectations",
            ),
            (
                case(
                    "id = \"a\"\ndimensions = [\"speed\"]\nmessage = \"m\"\nexpect = [{ kind = \"structured-valid\" }]",
                ),
                "unknown variant `speed`",
            ),
            (
                case(
                    "id = \"a\"\nagent = \"other\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{ kind = \"structured-valid\" }]",
                ),
                "agent \"other\" is not in the dataset's agents",
            ),
            (
                case(
                    "id = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{ kind = \"contains\", values = [] }]",
                ),
                "expectation 1 (contains): values is empty",
            ),
            (
                case(
                    "id = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{ kind = \"budget\" }]",
                ),
                "give at least one of",
            ),
            (
                case(
                    "id = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{ kind = \"contains\", values = [\"x\"], typo = 1 }]",
                ),
                "unknown field `typo`",
            ),
            (
                case(
                    "id = \"a b\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{ kind = \"structured-valid\" }]",
                ),
                "the id must be",
            ),
            (
                case(
                    "id = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nfaults = { model = [{ call = 1, code = \"gremlins\" }] }\nexpect = [{ kind = \"structured-valid\" }]",
                ),
                "unknown model fault code \"gremlins\"",
            ),
            (
                format!(
                    "{HEAD}[[case]]\nid = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{{ kind = \"structured-valid\" }}]\n\
                     [[case]]\nid = \"a\"\ndimensions = [\"recovery\"]\nmessage = \"m\"\nexpect = [{{ kind = \"structured-valid\" }}]\n"
                ),
                "case a: the id is used twice",
            ),
            (HEAD.to_owned(), "the dataset has no [[case]]"),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(want).to_string();
            assert!(err.contains(want), "{want}: {err}");
            assert!(err.starts_with("evals/t.toml: "), "{err}");
        }
    }

    #[test]
    fn json_datasets_have_the_same_shape() {
        let text = r#"{"name": "j", "version": 2, "agents": {"calc": "c.toml"},
            "case": [{"id": "a", "dimensions": ["tool-selection"], "message": "m",
                      "expect": [{"kind": "tool-called", "tool": "calculate"}]}]}"#;
        let d = Dataset::parse(text, true, Path::new("j.json"), Path::new("."), &|_| {
            Ok(String::new())
        })
        .expect("valid");
        assert_eq!(d.version, 2);
        assert_eq!(
            d.cases[0].expect,
            vec![Expectation::ToolCalled {
                tool: "calculate".into(),
                input: None,
                times: None,
                executed: false
            }]
        );
    }

    #[test]
    fn the_hash_covers_the_sources_text() {
        let text = format!(
            "{HEAD}[[source]]\nid = \"h\"\ntitle = \"H\"\npath = \"h.md\"\n[[case]]\nid = \"a\"\n\
             dimensions = [\"groundedness\"]\nmessage = \"m\"\nexpect = [{{ kind = \"cites-source\", source = \"h\" }}]\n"
        );
        let with = |body: &'static str| {
            Dataset::parse(
                &text,
                false,
                Path::new("t.toml"),
                Path::new("."),
                &move |_| Ok(body.to_owned()),
            )
            .expect("valid")
        };
        let (a, b) = (with("one"), with("two"));
        assert_eq!(a.sources[0].text, "one");
        assert_ne!(a.sha256, b.sha256);
    }
}
