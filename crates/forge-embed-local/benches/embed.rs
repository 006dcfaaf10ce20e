//! The local model's embedding rate: chunk-sized texts (about 800 bytes, as `forge_rag::ingest`
//! cuts them) in batches of 32, and one short query. Criterion reports texts per second.
//! Needs the model: `crates/forge-embed-local/fetch-model.sh` (`.ci/run` runs it).

#![allow(clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use forge_embed_local::MiniLm;

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let sentence = format!(
                "Section {i}: employees may carry over up to five days of annual leave into the \
                 next year, provided their manager approves the request in writing. "
            );
            sentence.repeat(5).chars().take(800).collect()
        })
        .collect()
}

fn embed(c: &mut Criterion) {
    let model = MiniLm::load_default().unwrap_or_else(|e| panic!("{e}"));
    let chunks = texts(32);
    let mut g = c.benchmark_group("minilm");
    g.sample_size(10);
    g.throughput(Throughput::Elements(chunks.len() as u64));
    g.bench_function("chunks_800b_batch_32", |b| {
        b.iter(|| model.embed_blocking(&chunks).unwrap())
    });
    let query = vec!["How many leave days can I carry over?".to_owned()];
    g.throughput(Throughput::Elements(1));
    g.bench_function("query", |b| {
        b.iter(|| model.embed_blocking(&query).unwrap())
    });
    g.finish();
}

criterion_group!(benches, embed);
criterion_main!(benches);
