//! Stream decoding cost: SSE framing alone (Forge's decoder and `eventsource-stream`'s), and whole
//! provider responses decoded into model chunks, on the contract-test transcripts. `cargo bench -p forge-providers` reports bytes/s.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventsource_stream::Eventsource;
use forge_providers::Dialect;
use forge_providers::sse::SseDecoder;
use futures_util::StreamExt;

fn body(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let at = bytes
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or_else(|| panic!("{path} has no head"));
    bytes[at + 2..].to_vec()
}

fn decoding(c: &mut Criterion) {
    let cases = [
        (
            "openai_chat",
            Dialect::OpenAiChat,
            "openai_chat_parallel_tools_cached.http",
        ),
        (
            "openai_responses",
            Dialect::OpenAiResponses,
            "responses_parallel_calls.http",
        ),
        (
            "anthropic",
            Dialect::Anthropic,
            "anthropic_tool_use_cached.http",
        ),
    ];
    let mut group = c.benchmark_group("decode");
    for (label, dialect, file) in cases {
        let bytes = body(file);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("sse_only/{label}"), |b| {
            b.iter(|| {
                let mut out = Vec::new();
                let mut d = SseDecoder::new();
                // 64-byte reads, as a socket would deliver a slow stream.
                for piece in bytes.chunks(64) {
                    d.push(piece, &mut out).expect("valid");
                }
                d.finish(&mut out).expect("valid");
                out.len()
            })
        });
        // The same framing by `eventsource-stream`, the crate the decoder was weighed against
        // (docs/dependencies.md), driven by a current-thread runtime as a provider stream is.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        group.bench_function(format!("sse_eventsource_stream/{label}"), |b| {
            b.iter(|| {
                let pieces: Vec<Result<&[u8], std::convert::Infallible>> =
                    bytes.chunks(64).map(Ok).collect();
                runtime.block_on(
                    futures_util::stream::iter(pieces)
                        .eventsource()
                        .filter(|e| std::future::ready(e.is_ok()))
                        .count(),
                )
            })
        });
        group.bench_function(format!("chunks/{label}"), |b| {
            b.iter(|| {
                let mut decoder = dialect.decoder();
                let mut out = Vec::new();
                for piece in bytes.chunks(64) {
                    decoder.push(piece, &mut out).expect("valid");
                }
                decoder.finish(&mut out).expect("valid");
                out.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decoding);
criterion_main!(benches);
