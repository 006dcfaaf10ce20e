//! `forge files` as an operator runs it, on a SQLite store and a files directory: put (one
//! accepted and indexed, one refused with its reason and exit 1), list, get the same bytes back,
//! a reference, and delete reaching the indexed source.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::text;

fn forge_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(args)
        .current_dir(dir)
        .env("FORGE_FILE_KEYS", "k1=env:TEST_FILE_KEY")
        .env("TEST_FILE_KEY", "0123456789abcdef0123456789abcdef")
        .output()
        .unwrap()
}

#[test]
fn files_are_put_listed_fetched_referenced_and_deleted() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("leave.md"),
        "# Leave\n\nAnnual leave is twenty five days.\n",
    )
    .unwrap();
    std::fs::write(dir.join("fake.png"), "these are words, not pixels").unwrap();

    let out = forge_in(
        &dir,
        &[
            "files", "put", "--index", "internal", "leave.md", "fake.png",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "one refused: {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("leave.md\ttext/markdown"), "{stdout}");
    assert!(stdout.contains("source file:file_"), "{stdout}");
    assert!(
        text(&out.stderr).contains("fake.png: refused (type_mismatch)"),
        "{}",
        text(&out.stderr)
    );
    let id = stdout.split('\t').next().unwrap().to_owned();

    let listed = forge_in(&dir, &["files", "list", "--json"]);
    let records: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(records.as_array().unwrap().len(), 1);
    assert_eq!(records[0]["id"], id.as_str());

    let got = forge_in(&dir, &["files", "get", &id]);
    assert!(got.status.success(), "{}", text(&got.stderr));
    assert_eq!(got.stdout, std::fs::read(dir.join("leave.md")).unwrap());
    let reference = forge_in(&dir, &["files", "ref", &id, "--ttl", "60"]);
    assert!(
        text(&reference.stdout).starts_with("k1."),
        "{}",
        text(&reference.stdout)
    );
    // Without the key the server verifies with, a reference would die with the command.
    let keyless = Command::new(env!("CARGO_BIN_EXE_forge"))
        .args(["files", "ref", &id])
        .current_dir(&dir)
        .env_remove("FORGE_FILE_KEYS")
        .output()
        .unwrap();
    assert_eq!(keyless.status.code(), Some(2));
    assert!(text(&keyless.stdout).is_empty());
    assert!(
        text(&keyless.stderr).contains("no --file-key"),
        "{}",
        text(&keyless.stderr)
    );

    let found = forge_in(&dir, &["rag", "search", "--json", "annual leave"]);
    assert!(
        text(&found.stdout).contains(&format!("file:{id}")),
        "{}",
        text(&found.stdout)
    );
    let out = forge_in(&dir, &["files", "delete", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = forge_in(&dir, &["rag", "search", "--json", "annual leave"]);
    assert!(
        !text(&found.stdout).contains(&id),
        "{}",
        text(&found.stdout)
    );
    assert_eq!(
        text(&forge_in(&dir, &["files", "list"]).stdout).trim(),
        "no files"
    );
    let blobs: Vec<_> = walk(&dir.join("forge-files"));
    assert!(blobs.is_empty(), "{blobs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
