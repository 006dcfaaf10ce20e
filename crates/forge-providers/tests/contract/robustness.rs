//! Robustness: the same transcript split at arbitrary byte boundaries parses identically, and no
//! input — random bytes, or a real transcript damaged at random — makes a decoder panic.

use forge_core::ports::model::ModelChunk;
use forge_providers::Dialect;
use forge_providers::wire::Decoded;
use proptest::prelude::*;

/// The successful event-stream transcripts in `tests/transcripts/`, with their dialect.
fn streams() -> Vec<(Dialect, Vec<u8>)> {
    let dir = format!("{}/tests/transcripts", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("transcripts") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let dialect = if name.starts_with("openai_chat") {
            Dialect::OpenAiChat
        } else if name.starts_with("responses") {
            Dialect::OpenAiResponses
        } else if name.starts_with("anthropic") {
            Dialect::Anthropic
        } else {
            continue;
        };
        let bytes = std::fs::read(&path).expect("read");
        let Some(at) = bytes.windows(2).position(|w| w == b"\n\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&bytes[..at]);
        if head.starts_with("HTTP/1.1 200") && head.contains("event-stream") {
            out.push((dialect, bytes[at + 2..].to_vec()));
        }
    }
    assert!(
        out.len() >= 8,
        "the stream transcripts are missing from {dir}"
    );
    out
}

fn decode_in_pieces(dialect: Dialect, body: &[u8], cuts: &[usize]) -> Decoded {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut decoder = dialect.decoder();
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut result = Ok(());
    for cut in cuts.into_iter().chain([body.len()]) {
        result = decoder.push(&body[start..cut], &mut chunks);
        start = cut;
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = decoder.finish(&mut chunks);
    }
    Decoded {
        chunks,
        error: result.err(),
    }
}

/// A decode either failed or ended with exactly one `Finish`, last.
fn well_formed(d: &Decoded) -> bool {
    let finishes = d
        .chunks
        .iter()
        .filter(|c| matches!(c, ModelChunk::Finish(_)))
        .count();
    match d.error {
        Some(_) => finishes == 0,
        None => finishes == 1 && matches!(d.chunks.last(), Some(ModelChunk::Finish(_))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_split_parses_like_the_whole(cuts in proptest::collection::vec(any::<usize>(), 0..24)) {
        for (dialect, body) in streams() {
            let whole = dialect.decode_body(&body, false);
            let pieces = decode_in_pieces(dialect, &body, &cuts);
            prop_assert_eq!(pieces, whole);
        }
    }

    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        for dialect in [Dialect::OpenAiChat, Dialect::OpenAiResponses, Dialect::Anthropic] {
            prop_assert!(well_formed(&decode_in_pieces(dialect, &bytes, &cuts)));
            prop_assert!(well_formed(&dialect.decode_body(&bytes, true)));
        }
    }

    #[test]
    fn damaged_transcripts_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        keep in any::<usize>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        for (dialect, mut body) in streams() {
            for (at, byte) in &flips {
                let len = body.len();
                body[at % len] = *byte;
            }
            body.truncate(keep % (body.len() + 1));
            prop_assert!(well_formed(&decode_in_pieces(dialect, &body, &cuts)));
        }
    }
}
