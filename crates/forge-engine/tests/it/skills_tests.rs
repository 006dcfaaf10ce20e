//! Skills: listed in `load_skill` for the model, loaded with their resources, and scripts that
//! run only where the deployment enabled them.

use std::path::{Path, PathBuf};

use forge_core::agent::RunLimits;
use forge_core::run::RunStatus;
use forge_engine::{LOAD_SKILL, RUN_SKILL_SCRIPT, SkillLibrary};

use crate::harness::{agent, harness_built};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/skills")
}

/// A skill whose script records that it ran, in a fresh directory.
fn skill_with_marker_script() -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "forge-skill-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    let dir = root.join("probe");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: probe\ndescription: Writes a marker when its script runs.\n---\nRun scripts/mark.sh.\n",
    )
    .unwrap();
    let script = dir.join("scripts/mark.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > received.json\nprintf '{\"ran\": true, \"home\": \"%s\"}' \"$HOME\"\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root
}

/// The tool names of the first model request.
fn first_offered(h: &crate::harness::Harness) -> Vec<String> {
    h.model.requests.lock().unwrap()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

const LOAD_STYLE: &str = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "load_skill", input = { name = "style" } }]
[[conversation.turn]]
tool_calls = [{ id = "c2", name = "load_skill", input = { name = "style", resource = "tone.md" } }]
[[conversation.turn]]
text = ["Loaded."]
"#;

#[tokio::test]
async fn skills_are_offered_by_description_and_loaded_with_their_resources() {
    let mut def = agent(&[], RunLimits::default());
    def.skills = vec!["style".into(), "refunds".into()];
    let h = harness_built(LOAD_STYLE, vec![], def, |b| {
        b.skills(SkillLibrary::load_dir(&examples()).unwrap())
    });
    let done = h.run("reply to an upset customer").await;
    assert_eq!(done.outcome.status, RunStatus::Completed, "{}", done.log);

    let requests = h.model.requests.lock().unwrap();
    let tools: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    // Scripts are disabled by default: the refunds skill has one, yet no script tool is offered.
    assert_eq!(tools, [LOAD_SKILL]);
    let description = &requests[0].tools[0].description;
    assert!(
        description.contains("- style: House style for replies to customers.")
            && description.contains("- refunds: How support staff decide and issue refunds."),
        "{description}"
    );
    assert!(
        done.log
            .contains(r#""name":"style","version":"2","instructions":"#),
        "{}",
        done.log
    );
    assert!(
        done.log
            .contains(r#""resources":["tone.md"],"scripts":[],"scripts_enabled":false"#),
        "{}",
        done.log
    );
    assert!(done.log.contains("Lead with the answer"), "{}", done.log);
    assert!(
        done.log
            .contains(r#""content":"Acknowledge the problem in one sentence"#),
        "{}",
        done.log
    );
}

fn run_script_turns() -> &'static str {
    r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [{ id = "c1", name = "run_skill_script", input = { skill = "probe", script = "scripts/mark.sh", input = { order = "A-1" } } }]
[[conversation.turn]]
text = ["Done."]
"#
}

#[tokio::test]
async fn no_script_runs_unless_the_deployment_enables_scripts() {
    let root = skill_with_marker_script();
    let marker = root.join("probe/received.json");
    let mut def = agent(&[], RunLimits::default());
    def.skills = vec!["probe".into()];

    let h = harness_built(run_script_turns(), vec![], def.clone(), |b| {
        b.skills(SkillLibrary::load_dir(&root).unwrap())
    });
    let done = h.run("go").await;
    assert_eq!(done.outcome.status, RunStatus::Completed, "{}", done.log);
    let offered = first_offered(&h);
    assert_eq!(offered, [LOAD_SKILL]);
    assert!(
        done.log.contains(r#"tool_result c1 error {"code":"forbidden","message":"there is no tool named \"run_skill_script\" available to this run"}"#),
        "{}",
        done.log
    );
    assert!(
        !marker.exists(),
        "the script ran although scripts are disabled"
    );

    // Enabled, a script run waits for a person by default (issue 16, item 6).
    let h = harness_built(run_script_turns(), vec![], def.clone(), |b| {
        b.skills(SkillLibrary::load_dir(&root).unwrap().enable_scripts())
    });
    let done = h.run("go").await;
    assert!(
        matches!(done.outcome.status, RunStatus::Waiting(_)),
        "{}",
        done.log
    );
    assert!(done.log.contains("approval.requested"), "{}", done.log);
    assert!(!marker.exists(), "the script ran before its approval");

    // An agent that waives the approval runs it at once.
    let mut waived = def;
    waived.approvals.insert(
        RUN_SKILL_SCRIPT.into(),
        forge_core::ports::tool::ApprovalPolicy::Never,
    );
    let h = harness_built(run_script_turns(), vec![], waived, |b| {
        b.skills(SkillLibrary::load_dir(&root).unwrap().enable_scripts())
    });
    let done = h.run("go").await;
    assert_eq!(done.outcome.status, RunStatus::Completed, "{}", done.log);
    let offered = first_offered(&h);
    assert_eq!(offered, [LOAD_SKILL, RUN_SKILL_SCRIPT]);
    // It ran, got its input on stdin, and saw no inherited environment (no HOME).
    assert!(
        done.log
            .contains(r#"tool_result c1 {"ran":true,"home":""}"#),
        "{}",
        done.log
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        r#"{"order":"A-1"}"#
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_script_that_never_reads_its_input_times_out_writing_included() {
    let root = skill_with_marker_script();
    let script = root.join("probe/scripts/mark.sh");
    std::fs::write(
        &script,
        "#!/bin/sh
sleep 30
",
    )
    .unwrap();
    // Far more input than a pipe holds: writing it blocks until the script reads.
    let big = "x".repeat(1 << 20);
    let turns = format!(
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{{ id = \"c1\", name = \"run_skill_script\", input = {{ skill = \"probe\", script = \"scripts/mark.sh\", input = \"{big}\" }} }}]\n[[conversation.turn]]\ntext = [\"Done.\"]\n"
    );
    let mut def = agent(
        &[],
        RunLimits {
            tool_timeout_ms: 500,
            max_tool_input_bytes: 2 << 20,
            ..RunLimits::default()
        },
    );
    def.skills = vec!["probe".into()];
    def.approvals.insert(
        RUN_SKILL_SCRIPT.into(),
        forge_core::ports::tool::ApprovalPolicy::Never,
    );
    let h = harness_built(&turns, vec![], def, |b| {
        b.skills(SkillLibrary::load_dir(&root).unwrap().enable_scripts())
    });
    let started = std::time::Instant::now();
    let done = tokio::time::timeout(std::time::Duration::from_secs(20), h.run("go"))
        .await
        .expect("the step is not held by the script");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        done.log
            .contains(r#"tool_result c1 error {"code":"tool_timeout""#),
        "{}",
        done.log.chars().take(2000).collect::<String>()
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn an_unknown_skill_or_resource_is_a_clear_error() {
    let script = r#"
[[conversation]]
[[conversation.turn]]
tool_calls = [
  { id = "c1", name = "load_skill", input = { name = "payroll" } },
  { id = "c2", name = "load_skill", input = { name = "style", resource = "../../etc/passwd" } },
]
[[conversation.turn]]
text = ["ok"]
"#;
    let mut def = agent(&[], RunLimits::default());
    def.skills = vec!["style".into()];
    let h = harness_built(script, vec![], def, |b| {
        b.skills(SkillLibrary::load_dir(&examples()).unwrap())
    });
    let done = h.run("go").await;
    assert!(
        done.log.contains(r#"tool_result c1 error {"code":"forbidden","message":"there is no skill named \"payroll\" available to this run"}"#),
        "{}",
        done.log
    );
    assert!(
        done.log.contains(r#"tool_result c2 error {"code":"invalid_input","message":"skill \"style\" has no resource \"../../etc/passwd\""}"#),
        "{}",
        done.log
    );
}

#[test]
fn an_agent_naming_a_missing_skill_is_refused_at_build() {
    let mut def = agent(&[], RunLimits::default());
    def.skills = vec!["nope".into()];
    let err = forge_engine::Engine::builder()
        .store(std::sync::Arc::new(
            forge_store_memory::MemoryStore::default(),
        ))
        .model(std::sync::Arc::new(
            forge_providers::ScriptedProvider::empty(),
        ))
        .skills(SkillLibrary::load_dir(&examples()).unwrap())
        .agent(def)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent tester is invalid: skill nope is not in the skill library"
    );
}
