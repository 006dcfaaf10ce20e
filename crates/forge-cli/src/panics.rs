//! What the `forge` binary prints when it panics: where, never what.
//!
//! The standard hook prints the panic's message, and a message can quote what was being
//! processed: a slicing bug prints the text around the cut (a document, a prompt, a tool's
//! output). Forge's hook prints the location and the thread only, and says that the message was
//! withheld. A request handler's panic is still answered `500 INTERNAL` and a run's fails its job
//! (`forge-server`, `forge-engine`); this covers what the process itself prints.

/// The line printed for a panic at `location` on the thread named `thread`.
fn report(location: Option<&std::panic::Location<'_>>, thread: Option<&str>) -> String {
    let at = location.map_or_else(
        || "an unknown place".to_owned(),
        |l| format!("{}:{}:{}", l.file(), l.line(), l.column()),
    );
    format!(
        "forge: internal error (a bug) at {at} on thread '{}'; its message is withheld, as it \
         may quote the text being processed. Please report the location.",
        thread.unwrap_or("<unnamed>")
    )
}

/// Whether a panic is the standard library's on writing to a closed stdout (`forge runs list |
/// head -1`, once `head` has its line): `println!` panics with that message.
fn stdout_closed(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

/// The status a shell gives a process that SIGPIPE stopped (128 + 13), which Rust's runtime
/// ignores so that a write fails instead.
const CLOSED_STDOUT_STATUS: i32 = 141;

/// Replaces the process's panic hook with one that prints [`report`]'s line — or, when the
/// reader of stdout went away, ends the process quietly with [`CLOSED_STDOUT_STATUS`], as a
/// command stopped by SIGPIPE does.
pub(crate) fn install() {
    std::panic::set_hook(Box::new(|info| {
        if stdout_closed(info.payload()) {
            std::process::exit(CLOSED_STDOUT_STATUS);
        }
        let thread = std::thread::current();
        eprintln!("{}", report(info.location(), thread.name()));
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn only_the_standard_librarys_closed_stdout_panic_is_taken_for_one() {
        let closed = String::from("failed printing to stdout: Broken pipe (os error 32)");
        assert!(stdout_closed(&closed));
        assert!(!stdout_closed(
            &"failed printing to stdout: No space left on device"
        ));
        assert!(!stdout_closed(&"Broken pipe in the document being cut"));
        assert!(!stdout_closed(&42_u8));
    }

    #[test]
    fn the_report_names_the_place_and_never_the_message() {
        let seen = Arc::new(Mutex::new(String::new()));
        let keep = seen.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *keep.lock().unwrap() = report(info.location(), Some("t"));
        }));
        let line = line!() + 1;
        let result = std::panic::catch_unwind(|| panic!("cannot cut inside DOCUMENT-TEXT-51"));
        std::panic::set_hook(previous);
        assert!(result.is_err());
        let printed = seen.lock().unwrap().clone();
        assert!(!printed.contains("DOCUMENT-TEXT"), "{printed}");
        assert!(printed.contains(&format!("panics.rs:{line}")), "{printed}");
    }
}
