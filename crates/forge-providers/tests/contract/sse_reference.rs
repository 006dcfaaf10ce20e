//! Forge's SSE decoder against `eventsource-stream`, the well-kept crate it was weighed against:
//! on every recorded event-stream transcript, split at every read size a socket might use, both
//! dispatch the same events. Where they differ by design (a last event with no blank line after
//! it, an event past the size cap) is pinned here too, so the reason the decoder stays is tested.

use std::convert::Infallible;

use eventsource_stream::Eventsource;
use forge_providers::sse::{SseDecoder, SseError, SseEvent};
use futures_util::StreamExt;

/// The body of every recorded event-stream response.
fn event_streams() -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/tests/transcripts", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "http") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let Some(at) = bytes.windows(2).position(|w| w == b"\n\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&bytes[..at]).to_ascii_lowercase();
        if head.contains("content-type: text/event-stream") {
            out.push((path.display().to_string(), bytes[at + 2..].to_vec()));
        }
    }
    out.sort();
    out
}

fn ours(body: &[u8], read: usize) -> Result<Vec<(String, String)>, SseError> {
    let (mut decoder, mut out) = (SseDecoder::new(), Vec::new());
    for piece in body.chunks(read) {
        decoder.push(piece, &mut out)?;
    }
    decoder.finish(&mut out)?;
    Ok(out.into_iter().map(named).collect())
}

fn named(e: SseEvent) -> (String, String) {
    (e.event.unwrap_or_else(|| "message".to_owned()), e.data)
}

async fn reference(body: &[u8], read: usize) -> Vec<(String, String)> {
    let pieces: Vec<Result<Vec<u8>, Infallible>> =
        body.chunks(read).map(|p| Ok(p.to_vec())).collect();
    futures_util::stream::iter(pieces)
        .eventsource()
        .map(|e| {
            let e = e.unwrap();
            (e.event, e.data)
        })
        .collect()
        .await
}

#[tokio::test]
async fn every_recorded_stream_decodes_as_the_reference_crate_decodes_it() {
    let streams = event_streams();
    assert!(streams.len() >= 10, "only {} event streams", streams.len());
    for (name, body) in &streams {
        for read in [1, 2, 3, 7, 64, 4096, body.len().max(1)] {
            let mine = ours(body, read).unwrap();
            assert!(!mine.is_empty(), "{name}: no events");
            let theirs = reference(body, read).await;
            if body.ends_with(b"\n\n") || body.ends_with(b"\r\n\r\n") {
                assert_eq!(mine, theirs, "{name}, {read}-byte reads");
            } else {
                // Cut off mid-event: Forge dispatches the tail (the caller finds it malformed
                // and says so); the reference drops it silently.
                assert_eq!(mine.len(), theirs.len() + 1, "{name}, {read}-byte reads");
                assert_eq!(
                    mine[..theirs.len()],
                    theirs[..],
                    "{name}, {read}-byte reads"
                );
            }
        }
    }
}

#[tokio::test]
async fn where_the_decoders_differ_forge_keeps_the_usage_report_and_bounds_memory() {
    // A server that closes without the final blank line: the reference drops the last event,
    // which for a provider is the usage report.
    let unterminated = b"data: {\"delta\":\"hi\"}\n\ndata: {\"usage\":{\"input_tokens\":3}}\n";
    let mine = ours(unterminated, 5).unwrap();
    let theirs = reference(unterminated, 5).await;
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    // A line that never ends: Forge refuses it at the cap; the reference would buffer it whole.
    let endless = vec![b'x'; forge_providers::sse::MAX_EVENT_BYTES + 1];
    let mut head = b"data: ".to_vec();
    head.extend_from_slice(&endless);
    assert_eq!(ours(&head, 1 << 20), Err(SseError::TooLarge));
}
