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

/// Replaces the process's panic hook with one that prints [`report`]'s line.
pub(crate) fn install() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        eprintln!("{}", report(info.location(), thread.name()));
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

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
