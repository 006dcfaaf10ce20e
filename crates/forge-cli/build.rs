//! Records the commit the binary is built from, for `forge --version`: `git rev-parse` in the
//! checkout, or `FORGE_COMMIT` when set (a build from a source archive), else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FORGE_COMMIT");
    // A new commit or a checkout moves HEAD (or the branch it names).
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/packed-refs",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("FORGE_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .filter(|c| !c.is_empty())
    });
    println!(
        "cargo:rustc-env=FORGE_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
}
