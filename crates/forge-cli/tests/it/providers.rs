//! `forge run` against real HTTP model servers: the workload's mock, reached as
//! `openai-compatible` through a base URL, and as a named provider from a providers file.

use forge_testkit::mock_model::MockModelServer;

use crate::{forge, forge_with_env, text};

fn mock() -> (tokio::runtime::Runtime, MockModelServer) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(MockModelServer::start_recording()).unwrap();
    (rt, server)
}

#[test]
fn forge_run_works_against_the_mock_as_openai_compatible_with_a_base_url() {
    let (_rt, server) = mock();
    let out = forge_with_env(
        &[
            "run",
            "--json",
            "--agent",
            "examples/agents/workload.toml",
            "Look three keys up.",
        ],
        &[("FORGE_OPENAI_COMPATIBLE_BASE_URL", &server.base_url())],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("scripted"), "{stderr}");
    let events: Vec<serde_json::Value> = crate::run_events(&out.stdout)
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "step.started").count(),
        4,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"run.completed"), "{kinds:?}");
    let completed = events.last().unwrap();
    assert_eq!(completed["text"], "w0 w1 w2 w3 w4 w5 w6 w7 ", "{completed}");
    // Usage from the mock's include_usage chunks reached the run: 3 calls × 12 + 8 output tokens.
    assert_eq!(
        completed["usage"]["output_tokens"],
        3 * 12 + 8,
        "{completed}"
    );

    assert_eq!(server.stats()["chat"], 4);
    assert_eq!(server.stats()["streamed"], 4);
    // What Forge sent: the history grows by a call and its result per step; the tool is offered.
    let bodies: Vec<serde_json::Value> = server
        .requests()
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap())
        .collect();
    let lengths: Vec<usize> = bodies
        .iter()
        .map(|b| b["messages"].as_array().unwrap().len())
        .collect();
    assert_eq!(lengths, vec![2, 4, 6, 8]);
    assert_eq!(bodies[0]["model"], "mock-steps-3");
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "lookup");
    assert_eq!(bodies[3]["messages"][7]["role"], "tool");
    assert_eq!(bodies[3]["messages"][7]["tool_call_id"], "call_2");
}

#[test]
fn a_named_provider_from_a_providers_file() {
    let (_rt, server) = mock();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("providers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let providers = dir.join("providers.toml");
    std::fs::write(
        &providers,
        format!(
            "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\
             headers = {{ \"x-mock-steps\" = \"1\", \"x-mock-chunks\" = \"2\" }}\n",
            server.base_url()
        ),
    )
    .unwrap();
    let agent = dir.join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\nmodel = \"local:anything\"\ntools = [\"lookup\"]\n",
    )
    .unwrap();
    let out = forge(&[
        "run",
        "--providers",
        providers.to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
        "hi",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("assistant: w0 w1"), "{stdout}");
    assert_eq!(
        server.stats()["chat"],
        2,
        "headers set K=1: one call, then text"
    );
}

/// A refused or unreachable model says where and why (issue 68, item 1): the endpoint, the
/// status and the provider's words, or the connection's cause — with the key scrubbed.
#[test]
fn a_failed_model_call_says_the_url_status_and_provider_message() {
    use forge_testkit::wire::{Reply, WireServer};
    let key = "sk-proj-Kx7vQ2mN9pL4rT8wZ1yB3cD5fG6hJ0aS";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(WireServer::start(vec![Reply::json(
            401,
            format!(
                r#"{{"error":{{"message":"Incorrect API key provided: {key}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#
            ),
        )]))
        .unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = forge_with_env(
        &["run", "--agent", "examples/agents/workload.toml", "hi"],
        &[
            ("FORGE_OPENAI_COMPATIBLE_BASE_URL", &base),
            ("OPENAI_COMPATIBLE_API_KEY", key),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains(&format!(
            "the model call failed (authentication): POST {base}/chat/completions: HTTP 401: \
             Incorrect API key provided: [REDACTED]."
        )),
        "{said}"
    );
    assert!(!said.contains(key), "{said}");

    // Nothing listens: the operating system's words.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = forge_with_env(
        &["run", "--agent", "examples/agents/workload.toml", "hi"],
        &[(
            "FORGE_OPENAI_COMPATIBLE_BASE_URL",
            &format!("http://127.0.0.1:{port}/v1"),
        )],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "the model call failed (transport): POST http://127.0.0.1:{port}/v1/chat/completions: "
        )) && said.contains("refused"),
        "{said}"
    );
}

/// A tool call the model garbled (Groq's `tool_use_failed`, inside the stream) goes back to the
/// model as that call's error, and the run recovers on the next step (issue 68, item 11).
#[test]
fn a_garbled_tool_call_goes_back_to_the_model_and_the_run_recovers() {
    use forge_testkit::wire::{Reply, WireServer};
    let transcript = |name: &str| {
        let path = crate::repo()
            .join("crates/forge-providers/tests/transcripts")
            .join(name);
        Reply::from_http(&std::fs::read(&path).unwrap()).unwrap()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(WireServer::start(vec![
            transcript("groq_tool_use_failed_in_stream.http"),
            transcript("openai_chat_text.http"),
        ]))
        .unwrap();
    let out = forge_with_env(
        &[
            "run",
            "--json",
            "--agent",
            "examples/agents/workload.toml",
            "Look k0 up.",
        ],
        &[(
            "FORGE_OPENAI_COMPATIBLE_BASE_URL",
            &format!("{}/v1", server.base_url()),
        )],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("run.completed"), "{stdout}");
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "one call per step: the garbled one was not sent again"
    );
    // The second step's history: the call as the model meant it, refused with why.
    let messages = requests[1].json()["messages"].clone();
    let messages = messages.as_array().unwrap();
    let call = &messages[messages.len() - 2];
    assert_eq!(
        call["tool_calls"][0]["function"]["name"], "lookup",
        "{call}"
    );
    let result = &messages[messages.len() - 1];
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], call["tool_calls"][0]["id"]);
    let said = result["content"].as_str().unwrap();
    assert!(
        said.contains("invalid_tool_call")
            && said.contains(r#"<function=lookup>{\"key\": k0}</function>"#),
        "{said}"
    );
}

/// A missing key does not hide an unknown tool or skill: every configuration problem is
/// reported at once (issue 68, item 8).
#[test]
fn every_configuration_problem_is_reported_at_once() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("providers-all-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\n\
         model = \"anthropic:claude-sonnet-4-5\"\ntools = [\"nope\", \"calculate\", \"nada\"]\n",
    )
    .unwrap();
    let out = forge_with_env(
        &["run", "--agent", agent.to_str().unwrap(), "hi"],
        &[("ANTHROPIC_API_KEY", "")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("2 configuration problem(s):"), "{stderr}");
    assert!(stderr.contains("ANTHROPIC_API_KEY is not set"), "{stderr}");
    assert!(
        stderr.contains("tool nope is not registered; tool nada is not registered"),
        "{stderr}"
    );
}

#[test]
fn a_missing_credential_or_base_url_fails_before_any_run_with_what_to_set() {
    let out = forge_with_env(
        &["run", "--agent", "examples/agents/workload.toml", "hi"],
        &[("FORGE_OPENAI_COMPATIBLE_BASE_URL", "")],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("FORGE_OPENAI_COMPATIBLE_BASE_URL"),
        "{stderr}"
    );

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("providers-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.toml");
    std::fs::write(
        &agent,
        "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\nmodel = \"anthropic:claude-sonnet-4-5\"\n",
    )
    .unwrap();
    let out = forge_with_env(
        &["run", "--agent", agent.to_str().unwrap(), "hi"],
        &[("ANTHROPIC_API_KEY", "")],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ANTHROPIC_API_KEY is not set"), "{stderr}");
}

#[test]
fn values_of_redact_env_variables_are_scrubbed_from_tool_results() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("redact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.toml"),
        "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\nmodel = \"scripted:a.script.toml\"\ntools = [\"lookup\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a.script.toml"),
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ name = \"lookup\", input = { key = \"tenant-db-password-42\" } }]\n[[conversation.turn]]\ntext = [\"done\"]\n",
    )
    .unwrap();
    let out = forge_with_env(
        &[
            "run",
            "--redact-env",
            "SEEDED_SECRET",
            "--agent",
            dir.join("a.toml").to_str().unwrap(),
            "go",
        ],
        &[("SEEDED_SECRET", "tenant-db-password-42")],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let result = stdout
        .lines()
        .find(|l| l.contains("← lookup"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(result.contains(r#""key":"[REDACTED]""#), "{result}");
    assert!(!result.contains("tenant-db-password-42"), "{result}");
}
