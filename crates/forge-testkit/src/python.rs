//! Python tools the tests run for real (moto's S3 server, the OTLP receiver): each lives in a
//! virtualenv its `install.sh` makes once per machine.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The virtualenv's directory: `$variable`, or `default`.
pub(crate) fn home(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable).map_or_else(|| default.into(), Into::into)
}

/// Runs `script` (under this crate) once per process; panics with `needed_for` when it fails.
pub(crate) fn install(done: &'static OnceLock<()>, script: &str, needed_for: &str) {
    done.get_or_init(|| {
        let script = format!("{}/{script}", env!("CARGO_MANIFEST_DIR"));
        let ok = Command::new("bash")
            .arg(&script)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{script} failed (it needs python3 with venv and PyPI); {needed_for}"
        );
    });
}
