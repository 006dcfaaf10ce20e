//! One exit status per outcome, whatever the command (the README's "Exit status" table): a
//! script tells "not found" from "refused" from "conflict" without reading the message.
//!
//! | status | outcome |
//! | --- | --- |
//! | 0 | done (an empty result included) |
//! | 1 | it ran and the outcome is a failure: a run failed, a gate failed, drift was found |
//! | 2 | invalid input, usage or configuration, and any error not listed below |
//! | 3 | not found (or not visible to this tenant) |
//! | 4 | refused: a policy or separation of duties said no |
//! | 5 | conflict: already decided, a busy thread, a run still active, a concurrent writer |
//! | 6 | unavailable: the store or a service failed in a way retrying may mend |
//! | 130 | interrupted (Ctrl-C), or the run was cancelled |
//! | 141 | stdout was closed (`| head`) |

use std::process::ExitCode;

use forge_core::ErrorKind;

/// The work ran and failed.
pub(crate) const FAILED: u8 = 1;
/// Invalid input, usage or configuration.
pub(crate) const INVALID: u8 = 2;
/// Not found.
pub(crate) const NOT_FOUND: u8 = 3;
/// Refused by a policy.
pub(crate) const REFUSED: u8 = 4;
/// A conflict with the state.
pub(crate) const CONFLICT: u8 = 5;
/// A store or service unavailable.
pub(crate) const UNAVAILABLE: u8 = 6;
/// Interrupted or cancelled.
pub(crate) const INTERRUPTED: u8 = 130;

/// The status for a command that failed with `error`: by the kind of the first Forge error in
/// its chain, [`INVALID`] when there is none.
pub(crate) fn status_of(error: &anyhow::Error) -> ExitCode {
    let kind = error.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<forge_core::Error>() {
            return Some(e.kind());
        }
        match cause.downcast_ref::<forge_engine::EngineError>() {
            Some(forge_engine::EngineError::Store(e)) => Some(e.kind()),
            _ => None,
        }
    });
    ExitCode::from(match kind {
        Some(ErrorKind::NotFound) => NOT_FOUND,
        Some(ErrorKind::Forbidden) => REFUSED,
        Some(ErrorKind::Conflict) => CONFLICT,
        Some(ErrorKind::Retryable) => UNAVAILABLE,
        Some(ErrorKind::Cancelled) => INTERRUPTED,
        Some(ErrorKind::Fatal) => FAILED,
        Some(ErrorKind::Invalid) | Some(_) | None => INVALID,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status() {
        let status = |e: forge_core::Error| status_of(&anyhow::Error::new(e).context("doing it"));
        assert_eq!(
            status(forge_core::Error::not_found("run", "r1")),
            ExitCode::from(NOT_FOUND)
        );
        assert_eq!(
            status(forge_core::Error::Forbidden("no".into())),
            ExitCode::from(REFUSED)
        );
        assert_eq!(
            status(forge_core::Error::Invalid("bad".into())),
            ExitCode::from(INVALID)
        );
        let engine = anyhow::Error::new(forge_engine::EngineError::Store(
            forge_core::Error::not_found("interaction", "i1"),
        ));
        assert_eq!(status_of(&engine), ExitCode::from(NOT_FOUND));
        assert_eq!(
            status_of(&anyhow::anyhow!("a bad flag")),
            ExitCode::from(INVALID)
        );
    }
}
