//! Checks for live-stream tests: what a streamed item says, and whether a client converged.

use forge_core::event::{RunEvent, RunEventKind};
use forge_core::id::RunId;
use forge_core::part::{Part, PartUpdate, TextPart};
use forge_core::stream::{StreamItem, Transcript, assistant_text};

/// The streamed text an item carries: the first chunk opens the text part, the rest are deltas.
pub fn chunk_text(item: &StreamItem) -> Option<&str> {
    match &item.event()?.kind {
        RunEventKind::PartUpdated {
            update: PartUpdate::TextDelta { text },
            ..
        }
        | RunEventKind::PartAdded {
            part: Part::Text(TextPart { text }),
            ..
        } if !text.is_empty() => Some(text),
        _ => None,
    }
}

/// Panics unless the client holds exactly the committed `log` of `run`, nothing provisional, and
/// shows each of the mock's `chunks` stamped chunks (`w<i>@…`) exactly once.
pub fn assert_converged(transcript: &Transcript, run: RunId, log: &[RunEvent], chunks: usize) {
    assert_eq!(
        transcript.committed(run),
        log,
        "the client holds the committed history"
    );
    assert_eq!(transcript.events(run), log, "nothing provisional is left");
    let text = transcript.text(run);
    assert_eq!(text, assistant_text(log));
    for i in 0..chunks {
        assert_eq!(
            text.matches(&format!("w{i}@")).count(),
            1,
            "chunk {i} shown exactly once: {text}"
        );
    }
}
