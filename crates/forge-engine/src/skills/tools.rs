//! The skill built-ins as tools: [`LoadSkill`] answers from the library, [`RunSkillScript`]
//! runs a loaded skill's script (only when the deployment enables scripts) within the call's
//! timeout and output limit. Both are registered like any other tool; which skill a call may
//! name is decided before, by [`super::gate`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use forge_core::ports::tool::{
    ApprovalPolicy, Tool, ToolClassification, ToolContext, ToolError, ToolSpec,
};
use serde_json::{Value, json};

use super::{LOAD_SKILL, RUN_SKILL_SCRIPT, Skill, SkillLibrary};
use crate::tools::built_in_spec;

/// The skill `name` of the library, or the refusal a call naming another gets.
fn skill<'l>(library: &'l SkillLibrary, name: &str) -> Result<&'l Skill, ToolError> {
    library.get(name).ok_or_else(|| ToolError::Refused {
        code: "forbidden",
        message: format!("there is no skill named {name:?} available to this run"),
    })
}

fn refused(code: &'static str, message: String) -> ToolError {
    ToolError::Refused { code, message }
}

/// The built-in [`LOAD_SKILL`]: a skill's instructions, or one of its resources.
pub(crate) struct LoadSkill {
    spec: ToolSpec,
    library: Arc<SkillLibrary>,
}

impl LoadSkill {
    pub(crate) fn new(library: Arc<SkillLibrary>) -> Self {
        let spec = built_in_spec(
            LOAD_SKILL,
            "Loads a skill: its instructions, or one of its resources. Skills you can load:",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The skill's name."},
                    "resource": {"type": "string", "description": "A resource path the skill lists; omit for its instructions."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            ToolClassification::Read,
        );
        Self { spec, library }
    }
}

#[async_trait]
impl Tool for LoadSkill {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _: &ToolContext, input: Value) -> Result<Value, ToolError> {
        let name = input.get("name").and_then(Value::as_str).unwrap_or("");
        let skill = skill(&self.library, name)?;
        match input.get("resource").and_then(Value::as_str) {
            None => Ok(json!({
                "name": skill.name,
                "version": skill.version,
                "instructions": skill.instructions,
                "resources": skill.resources.keys().collect::<Vec<_>>(),
                "scripts": skill.scripts.keys().collect::<Vec<_>>(),
                "scripts_enabled": self.library.scripts_enabled(),
            })),
            Some(path) => match skill.resources.get(path) {
                Some(content) => Ok(json!({
                    "name": skill.name,
                    "version": skill.version,
                    "resource": path,
                    "content": content,
                })),
                None => Err(refused(
                    "invalid_input",
                    format!("skill {name:?} has no resource {path:?}"),
                )),
            },
        }
    }
}

/// The built-in [`RUN_SKILL_SCRIPT`]: runs one of a skill's scripts.
pub(crate) struct RunSkillScript {
    spec: ToolSpec,
    library: Arc<SkillLibrary>,
}

impl RunSkillScript {
    pub(crate) fn new(library: Arc<SkillLibrary>) -> Self {
        let mut spec = built_in_spec(
            RUN_SKILL_SCRIPT,
            "Runs one of a loaded skill's scripts with a JSON input and returns its output.",
            json!({
                "type": "object",
                "properties": {
                    "skill": {"type": "string"},
                    "script": {"type": "string", "description": "A script path the skill lists, such as scripts/run.sh."},
                    "input": {"description": "JSON passed to the script on stdin."}
                },
                "required": ["skill", "script"],
                "additionalProperties": false
            }),
            ToolClassification::Write,
        );
        // A script is code the deployment ships but the model chooses to run: a person approves
        // each run unless the agent says otherwise (`approvals = { run_skill_script = "never" }`).
        spec.approval = ApprovalPolicy::Always;
        Self { spec, library }
    }
}

#[async_trait]
impl Tool for RunSkillScript {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, input: Value) -> Result<Value, ToolError> {
        let name = input.get("skill").and_then(Value::as_str).unwrap_or("");
        let skill = skill(&self.library, name)?;
        if !self.library.scripts_enabled() {
            return Err(refused(
                "forbidden",
                "skill scripts are disabled in this deployment".into(),
            ));
        }
        let script = input.get("script").and_then(Value::as_str).unwrap_or("");
        let Some(path) = skill.scripts.get(script) else {
            return Err(refused(
                "invalid_input",
                format!("skill {name:?} has no script {script:?}"),
            ));
        };
        run_script(
            skill,
            path,
            input.get("input").unwrap_or(&Value::Null),
            ctx.timeout,
            ctx.max_output_bytes,
        )
        .await
        .map_err(|(code, message)| refused(code, message))
    }
}

/// A skill's script, run as described in the module docs. The error is `(code, message)`.
pub(crate) async fn run_script(
    skill: &Skill,
    path: &Path,
    input: &Value,
    timeout: Duration,
    max_output: usize,
) -> Result<Value, (&'static str, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut child = tokio::process::Command::new(path)
        .current_dir(&skill.dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ("tool_failed", format!("the script could not start: {e}")))?;
    let mut stdin = child.stdin.take();
    let input = input.to_string();
    let mut stdout = child
        .stdout
        .take()
        .ok_or(("tool_failed", "the script has no stdout".to_owned()))?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or(("tool_failed", "the script has no stderr".to_owned()))?;
    // The whole call is under the timeout, writing its input included: a script that never reads
    // stdin cannot hold the step on a full pipe.
    let work = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let limit = max_output as u64 + 1;
        let mut stdout = (&mut stdout).take(limit);
        let mut stderr = (&mut stderr).take(4096);
        let write = async {
            if let Some(mut stdin) = stdin.take() {
                // A script that ignores its input may close stdin early; that is not an error.
                let _ = stdin.write_all(input.as_bytes()).await;
            }
        };
        let ((), a, b) = tokio::join!(
            write,
            stdout.read_to_end(&mut out),
            stderr.read_to_end(&mut err)
        );
        a.and(b)?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out, err))
    };
    let (status, out, err) = match tokio::time::timeout(timeout, work).await {
        Err(_) => {
            return Err((
                "tool_timeout",
                format!(
                    "the script did not finish within {} ms",
                    timeout.as_millis()
                ),
            ));
        }
        Ok(Err(e)) => return Err(("tool_failed", format!("the script failed: {e}"))),
        Ok(Ok(done)) => done,
    };
    if out.len() > max_output {
        return Err((
            "output_too_large",
            format!("the script wrote more than {max_output} bytes"),
        ));
    }
    if !status.success() {
        let tail = String::from_utf8_lossy(&err);
        return Err((
            "tool_failed",
            format!("the script exited with {status}: {}", tail.trim()),
        ));
    }
    let text = String::from_utf8_lossy(&out);
    Ok(serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.trim_end().to_owned())))
}
