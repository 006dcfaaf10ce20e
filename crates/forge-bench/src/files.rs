//! Files: upload throughput through the whole acceptance path (streamed to staging, hashed,
//! inspected, stored as a blob in a directory, recorded on a memory store) at a few sizes, and
//! the latency a real clamd adds per scan (its database generated, as in the tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use forge_core::id::UuidV7Generator;
use forge_core::time::SystemClock;
use forge_files::{
    BodyError, ClamdAddress, ClamdScanner, Files, FilesParts, FsBlobStore, Policy, RefKeys,
    Scanner, Upload,
};
use forge_store_memory::MemoryStore;

use crate::percentile;

/// `forge-bench files`.
#[derive(Debug, clap::Args)]
pub(crate) struct FilesArgs {
    /// File sizes to measure, in KiB, comma separated.
    #[arg(long, default_value = "4,256,4096,25600", value_delimiter = ',')]
    kib: Vec<usize>,
    /// Uploads per size.
    #[arg(long, default_value_t = 40)]
    uploads: usize,
    /// Also measure with a real clamd scanning each upload (needs clamav-daemon).
    #[arg(long)]
    clamd: bool,
}

fn service(dir: &std::path::Path, scanner: Option<Arc<dyn Scanner>>) -> anyhow::Result<Files> {
    let store = Arc::new(MemoryStore::default());
    Ok(Files::new(FilesParts {
        store: store.clone(),
        blobs: Arc::new(FsBlobStore::new(dir.join("blobs"))?),
        scanner,
        retriever: None,
        audit: Some(store),
        policy: Policy {
            max_bytes: 64 * 1024 * 1024,
            ..Policy::default()
        },
        staging: dir.join("staging"),
        keys: RefKeys::new(vec![("bench".into(), vec![1; 32])])?,
        clock: Arc::new(SystemClock),
        ids: Arc::new(UuidV7Generator),
    })?)
}

async fn measure(files: &Files, kib: usize, uploads: usize) -> anyhow::Result<Vec<Duration>> {
    let scope = forge_core::scope::Scope::parse("bench", "bench", &[])?;
    // Text (the common case, and the one inspected most: read whole for markup).
    let line = b"The quick brown fox jumps over the lazy dog, again and again.\n";
    let bytes: Vec<u8> = line.iter().copied().cycle().take(kib * 1024).collect();
    let mut times = Vec::with_capacity(uploads);
    for i in 0..uploads {
        let chunks: Vec<Result<Bytes, BodyError>> = bytes
            .chunks(64 * 1024)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let t = Instant::now();
        files
            .upload(
                &scope,
                Upload {
                    name: format!("f{i}.txt"),
                    declared_type: Some("text/plain".into()),
                    index_label: None,
                    label: None,
                },
                futures_util::stream::iter(chunks),
            )
            .await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times)
}

pub(crate) async fn run(args: FilesArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("forge-bench-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clamd = args.clamd.then(forge_testkit::clamd::Clamd::start);
    println!("| scanner | size KiB | uploads | p50 ms | p99 ms | MB/s (p50) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut configurations: Vec<(&str, Option<Arc<dyn Scanner>>)> = vec![("none", None)];
    if let Some(c) = &clamd {
        configurations.push((
            "clamd",
            Some(Arc::new(ClamdScanner::new(
                ClamdAddress::Unix(c.socket()),
                Duration::from_secs(60),
            ))),
        ));
    }
    for (name, scanner) in configurations {
        for &kib in &args.kib {
            let files = service(&dir.join(format!("{name}-{kib}")), scanner.clone())?;
            let times = measure(&files, kib, args.uploads).await?;
            let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
            let mbps = (kib as f64 / 1024.0) / p50.as_secs_f64().max(1e-9);
            println!(
                "| {name} | {kib} | {} | {:.2} | {:.2} | {mbps:.1} |",
                args.uploads,
                p50.as_secs_f64() * 1000.0,
                p99.as_secs_f64() * 1000.0
            );
            eprintln!(
                "{}",
                serde_json::json!({"bench": "files", "scanner": name, "kib": kib,
                    "p50_ms": p50.as_secs_f64() * 1000.0, "p99_ms": p99.as_secs_f64() * 1000.0,
                    "mb_per_s": mbps})
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
