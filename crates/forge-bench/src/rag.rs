//! Retrieval: ingestion throughput and query latency over synthetic documents at a given number of
//! chunks, on one store. Documents are deterministic pseudo-random text over a 5,000-word
//! vocabulary with a Zipf-like skew; queries are three words of middling frequency. Every source
//! is readable (the policy check per source is part of the measured query path).
//!
//! With `--vectors DIMS`, every chunk also gets a pseudo-random unit vector of that length (the
//! scan's cost does not depend on what the vectors mean, and a real model would take hours to
//! embed 100,000 chunks here), and nearest-chunk search is measured on its own: the store's
//! exact top 5 over every allowed source — brute force in the adapter, or pgvector's operator
//! with `--store pgvector`.

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
    /// sqlite, postgres, pgvector (a PostgreSQL with the extension, started by
    /// `forge-store-postgres/pgvector/start.sh`) or memory.
    #[arg(long)]
    store: String,
    /// Chunk counts to measure at, comma separated (each on a fresh store).
    #[arg(long, default_value = "10000,100000", value_delimiter = ',')]
    chunks: Vec<usize>,
    /// Queries per measurement.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Also store a vector of this length per chunk and measure nearest-chunk search (0: none).
    #[arg(long, default_value_t = 0)]
    vectors: usize,
}

/// The model name the benchmark's vectors are stored under.
const MODEL: &str = "bench:random";

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A pseudo-random unit vector of `dims` components.
    fn unit(&mut self, dims: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dims)
            .map(|_| (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0)
            .collect();
        forge_rag::vector::normalize(&mut v);
        v
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
    println!(
        "| store | chunks | ingest chunks/s | query p50 ms | query p99 ms | nearest p50 ms | nearest p99 ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
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
            if args.vectors > 0 {
                let vectors: Vec<Vec<f32>> = source
                    .chunks
                    .iter()
                    .map(|_| rng.unit(args.vectors))
                    .collect();
                store
                    .put_vectors(&scope, &source.id, &source.version, MODEL, &vectors)
                    .await?;
            }
            n += 1;
        }
        let ingest_rate = stored as f64 / started.elapsed().as_secs_f64();
        let retriever = Retriever::new(store.clone(), Arc::new(AllowAll));
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
        let mut nearest: Vec<Duration> = Vec::new();
        if args.vectors > 0 {
            for _ in 0..args.queries {
                let q = rng.unit(args.vectors);
                let t = Instant::now();
                // What `Retriever::find` does for the vector half: list, authorize, then scan.
                let allowed: Vec<SourceId> = store
                    .source_refs(&scope)
                    .await?
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                let hits = store.nearest(&scope, &allowed, MODEL, &q, 5).await?;
                nearest.push(t.elapsed());
                anyhow::ensure!(hits.len() == 5, "nearest found {} chunks", hits.len());
            }
            nearest.sort();
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let near = |p: f64| {
            if nearest.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.2}", ms(percentile(&nearest, p)))
            }
        };
        println!(
            "| {} | {stored} | {ingest_rate:.0} | {:.2} | {:.2} | {} | {} |",
            args.store,
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            near(0.5),
            near(0.99)
        );
        eprintln!(
            "{}",
            serde_json::json!({"bench": "rag", "store": args.store, "chunks": stored,
                "vector_dims": args.vectors,
                "ingest_chunks_per_s": ingest_rate, "query_p50_ms": ms(percentile(&times, 0.5)),
                "query_p99_ms": ms(percentile(&times, 0.99)),
                "nearest_p50_ms": (!nearest.is_empty()).then(|| ms(percentile(&nearest, 0.5))),
                "nearest_p99_ms": (!nearest.is_empty()).then(|| ms(percentile(&nearest, 0.99)))})
        );
    }
    Ok(())
}
