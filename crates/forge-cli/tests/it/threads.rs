//! `forge threads compact | show`: a compaction asked for from the CLI waits behind the thread's
//! runs, is executed by a `forge worker` like any run, and leaves every message stored.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{forge, repo, text};

fn field<'a>(out: &'a str, after: &str) -> &'a str {
    out.split_whitespace()
        .skip_while(|w| *w != after)
        .nth(1)
        .unwrap_or_else(|| panic!("no word after {after:?} in {out:?}"))
}

#[test]
fn a_compaction_asked_for_is_queued_executed_by_a_worker_and_shown() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("threads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("forge.db").display());
    let agent = "examples/agents/calculator.toml";

    let out = forge(&[
        "submit",
        "--store",
        &url,
        "--agent",
        agent,
        "What is 12 times 7?",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let thread = field(&text(&out.stdout), "thread").to_owned();
    for _ in 0..2 {
        let out = forge(&[
            "submit",
            "--store",
            &url,
            "--agent",
            agent,
            "--thread",
            &thread,
            "12 times 7?",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = forge(&[
        "threads", "compact", "--store", &url, "--agent", agent, &thread,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("queued behind the thread's active run"),
        "{said}"
    );
    let compaction = field(&said, "run").to_owned();

    let mut worker = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["worker", "--store", &url, "--poll-ms", "20", "--agent"])
        .arg(repo().join(agent))
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let show = || {
        forge(&[
            "threads", "show", "--store", &url, "--json", "--last", "50", &thread,
        ])
    };
    let started = Instant::now();
    let shown = loop {
        let out = show();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if !v["thread"]["summary"].is_null() {
            break v;
        }
        assert!(
            started.elapsed() < crate::patience(Duration::from_secs(60)),
            "the compaction never landed: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = worker.kill();
    let _ = worker.wait();

    // Three turns of four messages; the eight newest are kept, the four before them summarised.
    let summary = &shown["thread"]["summary"];
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["covered"], 4);
    assert_eq!(summary["run_id"], compaction.as_str());
    assert!(
        summary["text"]
            .as_str()
            .unwrap()
            .starts_with("Earlier, the user asked the calculator"),
        "{summary}"
    );
    let messages = shown["newest_messages"].as_array().unwrap();
    assert_eq!(messages.len(), 12, "compaction adds and removes no message");
    assert_eq!(summary["through"], messages[3]["id"]);

    let out = forge(&["runs", "events", "--store", &url, &compaction]);
    let events = text(&out.stdout);
    assert!(
        events.contains("thread compacted: summary v1 covers the first 4 messages"),
        "{events}"
    );
    let out = forge(&["threads", "show", "--store", &url, "--last", "2", &thread]);
    let person = text(&out.stdout);
    assert!(
        person.contains("summary v1 by scripted:calculator.script.toml covers the first 4"),
        "{person}"
    );
    assert_eq!(person.matches("\n[").count(), 2, "{person}");
    let _ = std::fs::remove_dir_all(&dir);
}
