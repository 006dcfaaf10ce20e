//! Help that lists only the flags that apply: subcommands share argument groups (where files are
//! kept and what an upload must pass, the embedder, who decides), and a flag that does nothing
//! for a subcommand is hidden from its `--help` (still accepted, so a shared environment or
//! script keeps working).

use clap::Arg;

/// What only an upload (or a reference) reads: the scanner, the limits and inspection switches.
pub(crate) const UPLOAD_ONLY: &[&str] = &[
    "clamd",
    "clamd_timeout_ms",
    "max_bytes",
    "tenant_max_bytes",
    "on_mismatch",
    "on_active_content",
    "on_archive",
];

/// What only issuing a file reference reads.
pub(crate) const REFERENCE_ONLY: &[&str] = &["keys", "max_reference_secs"];

/// The embedder's settings: only ingesting, embedding and searching sources read them.
pub(crate) const EMBEDDER: &[&str] = &[
    "embedder",
    "embedder_url",
    "embedder_key",
    "embedder_dimensions",
];

/// What only a decision reads: who decides, its idempotency key, self-approval.
pub(crate) const DECISION_ONLY: &[&str] = &["actor", "key", "allow_self_approval"];

/// What only running an agent reads, among the access flags.
pub(crate) const RUN_ONLY: &[&str] = &[
    "allow_skill_scripts",
    "allow_self_approval",
    "source_retention",
];

/// Hides the arguments named in any of `groups` from a subcommand's help.
pub(crate) fn hide(groups: &'static [&'static [&'static str]]) -> impl FnMut(Arg) -> Arg {
    move |arg| {
        let id = arg.get_id().as_str();
        if groups.iter().any(|g| g.contains(&id)) {
            arg.hide(true)
        } else {
            arg
        }
    }
}
