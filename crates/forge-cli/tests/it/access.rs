//! Policies, skills and redaction through the `forge` binary: what `forge tools` lists and finds
//! per scope, a denied call in `forge run`, a skill loaded from `--skills`, and a seeded secret
//! that appears nowhere in what the process prints.

use std::path::PathBuf;

use crate::{forge, forge_with_env, text};

fn workdir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("access-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Interns may use `lookup` but not `calculate`; everyone else may use both.
fn policies(dir: &std::path::Path) -> String {
    let path = dir.join("tools.cedar");
    std::fs::write(
        &path,
        r#"
permit(principal, action, resource);
forbid(principal in Forge::Role::"intern", action, resource == Forge::Tool::"calculate");
"#,
    )
    .unwrap();
    path.display().to_string()
}

fn agent(dir: &std::path::Path, turns: &str, extra: &str) -> String {
    std::fs::write(
        dir.join("a.toml"),
        format!(
            "name = \"a\"\nversion = \"1\"\ninstructions = \"i\"\nmodel = \"scripted:a.script.toml\"\ntools = [\"calculate\", \"lookup\"]\n{extra}"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("a.script.toml"), turns).unwrap();
    dir.join("a.toml").display().to_string()
}

#[test]
fn forge_tools_lists_and_searches_only_what_the_scope_may_discover() {
    let dir = workdir("tools");
    let policies = policies(&dir);
    let list = |roles: &str| {
        let out = forge(&[
            "tools",
            "list",
            "--json",
            "--policies",
            &policies,
            "--roles",
            roles,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        entries
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(list("staff").contains(&"calculate".to_owned()));
    let intern = list("intern");
    assert!(intern.contains(&"lookup".to_owned()), "{intern:?}");
    assert!(!intern.contains(&"calculate".to_owned()), "{intern:?}");

    let search = |roles: &str| {
        let out = forge(&[
            "tools",
            "search",
            "--json",
            "--policies",
            &policies,
            "--roles",
            roles,
            "arithmetic",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
    };
    let hits = search("staff");
    assert_eq!(hits[0]["entry"]["name"], "calculate");
    assert_eq!(
        hits[0]["signals"][0],
        serde_json::json!({"kind": "description_term", "term": "arithmetic", "count": 1})
    );
    assert!(search("intern").is_empty());
}

#[test]
fn a_denied_call_in_forge_run_is_a_forbidden_result() {
    let dir = workdir("run");
    let policies = policies(&dir);
    let agent = agent(
        &dir,
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ name = \"calculate\", input = { op = \"add\", a = 1, b = 2 } }]\n[[conversation.turn]]\ntext = [\"done\"]\n",
        "",
    );
    let run = |roles: &str| {
        let out = forge(&[
            "run",
            "--policies",
            &policies,
            "--roles",
            roles,
            "--agent",
            &agent,
            "add",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let staff = run("staff");
    assert!(staff.contains(r#"← calculate {"result":3}"#), "{staff}");
    let intern = run("intern");
    assert!(
        intern.contains(r#"there is no tool named \"calculate\" available to this run"#),
        "{intern}"
    );
}

/// Every problem of every policy file, each at its file, line and column: a syntax error and a
/// misspelled action that would have denied every tool (issue 68, items 3 and 8).
#[test]
fn bad_policies_fail_before_any_run_and_name_the_file() {
    let dir = workdir("bad");
    std::fs::write(dir.join("broken.cedar"), "permit(principal, action").unwrap();
    std::fs::write(
        dir.join("tools.cedar"),
        "permit(\n  principal,\n  action == Forge::Action::\"executee\",\n  resource\n);\n",
    )
    .unwrap();
    let agent = agent(
        &dir,
        "[[conversation]]\n[[conversation.turn]]\ntext = [\"x\"]\n",
        "",
    );
    let out = forge(&[
        "run",
        "--policies",
        dir.to_str().unwrap(),
        "--agent",
        &agent,
        "hi",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("failed to load policies: 2 problem(s) in the policies:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\n  broken.cedar:1:25: unexpected end of input"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\n  tools.cedar:3:13: for policy `tools.cedar#0`, unrecognized action `Forge::Action::\"executee\"`"),
        "{stderr}"
    );
}

#[test]
fn forge_run_loads_a_skill_from_the_skills_directory() {
    let dir = workdir("skills");
    let agent = agent(
        &dir,
        "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{ name = \"load_skill\", input = { name = \"style\" } }]\n[[conversation.turn]]\ntext = [\"styled\"]\n",
        "skills = [\"style\"]\n",
    );
    let out = forge(&[
        "run",
        "--json",
        "--skills",
        "examples/skills",
        "--agent",
        &agent,
        "write",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("Lead with the answer"), "{stdout}");
    assert!(stdout.contains(r#""scripts_enabled":false"#), "{stdout}");
}

#[test]
fn a_seeded_secret_appears_nowhere_in_what_forge_prints() {
    const SECRET: &str = "tenant-db-password-42";
    let dir = workdir("secret");
    let agent = agent(
        &dir,
        &format!(
            "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{{ name = \"lookup\", input = {{ key = \"{SECRET}\" }} }}]\n[[conversation.turn]]\ntext = [\"the password is {SECRET}\"]\n"
        ),
        "",
    );
    for json in [false, true] {
        let mut args = vec!["run", "--redact-env", "SEEDED_SECRET", "--agent", &agent];
        if json {
            args.push("--json");
        }
        let message = format!("my password is {SECRET}");
        args.push(&message);
        let out = forge_with_env(&args, &[("SEEDED_SECRET", SECRET)]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(
            !stdout.contains(SECRET) && !stderr.contains(SECRET),
            "the secret was printed:\n{stdout}\n{stderr}"
        );
        assert!(stdout.contains("[REDACTED]"), "{stdout}");
    }
}

#[test]
fn a_secret_split_across_streamed_chunks_is_never_printed() {
    const SECRET: &str = "qz7-vault-k9x42-zeta";
    let answer = format!("the password is {SECRET} ok");
    let dir = workdir("split-secret");
    for at in 1..answer.len() {
        let (a, b) = answer.split_at(at);
        let agent = agent(
            &dir,
            &format!("[[conversation]]\n[[conversation.turn]]\ntext = [\"{a}\", \"{b}\"]\n"),
            "",
        );
        for json in [false, true] {
            let mut args = vec![
                "run",
                "--store",
                "memory",
                "--redact-env",
                "SEEDED_SECRET",
                "--agent",
                &agent,
            ];
            if json {
                args.push("--json");
            }
            args.push("hello");
            let out = forge_with_env(&args, &[("SEEDED_SECRET", SECRET)]);
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{stdout}{stderr}");
            // Not the secret, nor any recognisable piece of it.
            for piece in SECRET.as_bytes().windows(6) {
                let piece = std::str::from_utf8(piece).unwrap();
                assert!(
                    !stdout.contains(piece) && !stderr.contains(piece),
                    "split at {at}: {piece:?} printed:\n{stdout}\n{stderr}"
                );
            }
            assert!(stdout.contains("the password is [REDACTED] ok"), "{stdout}");
        }
    }
}

#[test]
fn credentials_a_providers_file_references_are_scrubbed_too() {
    const SECRET: &str = "mounted-secret-from-a-file-0042";
    let dir = workdir("file-secret");
    let key = dir.join("vault-key");
    std::fs::write(&key, format!("{SECRET}\n")).unwrap();
    let providers = dir.join("providers.toml");
    std::fs::write(
        &providers,
        format!(
            "[providers.vault]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key = \"file:{}\"\n",
            key.display()
        ),
    )
    .unwrap();
    let agent = agent(
        &dir,
        &format!(
            "[[conversation]]\n[[conversation.turn]]\ntool_calls = [{{ name = \"lookup\", input = {{ key = \"{SECRET}\" }} }}]\n[[conversation.turn]]\ntext = [\"done\"]\n"
        ),
        "",
    );
    let out = forge(&[
        "run",
        "--json",
        "--providers",
        providers.to_str().unwrap(),
        "--agent",
        &agent,
        "go",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{stdout}"
    );
    assert!(stdout.contains("[REDACTED]"), "{stdout}");
}
