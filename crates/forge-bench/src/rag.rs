//! Retrieval: ingestion throughput and query latency over synthetic documents at a given number of
//! chunks, on one store. Documents are deterministic pseudo-random text over a 5,000-word
//! vocabulary with a Zipf-like skew; queries are three words of middling frequency. Every source
//! is readable (the policy check per source is part of the measured query path).

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_core::ports::policy::AllowAll;
use forge_core::scope::Scope;
use forge_rag::ingest::ingest;
use forge_rag::{Format, Retriever, SourceId};

use crate::percentile;

/// `forge-bench rag`.
#[derive(Debug, clap::Args)]
pub(crate) struct RagArgs {
    /// sqlite, postgres or memory.
    #[arg(long)]
    store: String,
    /// Chunk counts to measure at, comma separated (each on a fresh store).
    #[arg(long, default_value = "10000,100000", value_delimiter = ',')]
    chunks: Vec<usize>,
    /// Queries per measurement.
    #[arg(long, default_value_t = 200)]
    queries: usize,
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A word index skewed toward small indexes.
    fn word(&mut self, vocab: usize) -> usize {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        ((vocab as f64).powf(u) as usize)
            .saturating_sub(1)
            .min(vocab - 1)
    }
}

fn vocabulary() -> Vec<String> {
    let syllables = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "da", "fe",
    ];
    (0..5_000)
        .map(|i| {
            let mut w = String::new();
            let mut n = i + 12;
            while n > 0 {
                w.push_str(syllables[n % syllables.len()]);
                n /= syllables.len();
            }
            w
        })
        .collect()
}

/// A document of about `chunks` chunks.
fn document(rng: &mut Rng, vocab: &[String], chunks: usize) -> String {
    let mut text = String::new();
    let target = chunks * forge_rag::ingest::TARGET_CHUNK;
    while text.len() < target {
        for i in 0..12 {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(&vocab[rng.word(vocab.len())]);
        }
        text.push_str(". ");
        if rng.next().is_multiple_of(8) {
            text.push_str("\n\n");
        }
    }
    text
}

pub(crate) async fn run(args: RagArgs) -> anyhow::Result<()> {
    let vocab = vocabulary();
    let scope = Scope::parse("bench", "bench", &[])?;
    println!("| store | chunks | ingest chunks/s | query p50 ms | query p99 ms |");
    println!("| --- | --- | --- | --- | --- |");
    for &total in &args.chunks {
        let (_, store, _guard) = crate::open_both(&args.store).await?;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let per_doc = 20;
        let started = Instant::now();
        let mut stored = 0;
        let mut n = 0;
        while stored < total {
            let raw = document(&mut rng, &vocab, per_doc.min(total - stored).max(1));
            let source = ingest(
                SourceId::new(format!("doc-{n}"))?,
                format!("Document {n}"),
                "internal",
                Format::Text,
                serde_json::Value::Null,
                &raw,
            );
            stored += source.chunks.len();
            store.put_source(&scope, &source).await?;
            n += 1;
        }
        let ingest_rate = stored as f64 / started.elapsed().as_secs_f64();
        let retriever = Retriever::new(store, Arc::new(AllowAll));
        let mut times: Vec<Duration> = Vec::with_capacity(args.queries);
        for _ in 0..args.queries {
            // Words of middling frequency: ranks 50..1050.
            let q: Vec<&str> = (0..3)
                .map(|_| vocab[50 + (rng.next() % 1000) as usize].as_str())
                .collect();
            let t = Instant::now();
            let hits = retriever.search(&scope, &q.join(" "), 5).await?;
            times.push(t.elapsed());
            std::hint::black_box(hits);
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| {} | {stored} | {ingest_rate:.0} | {:.2} | {:.2} |",
            args.store,
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99))
        );
        eprintln!(
            "{}",
            serde_json::json!({"bench": "rag", "store": args.store, "chunks": stored,
                "ingest_chunks_per_s": ingest_rate, "query_p50_ms": ms(percentile(&times, 0.5)),
                "query_p99_ms": ms(percentile(&times, 0.99))})
        );
    }
    Ok(())
}
