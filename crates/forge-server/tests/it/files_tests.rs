//! Files over real HTTP: uploads with their limits and refusals (before and while the body
//! arrives, and from a client that stalls), signed downloads refused alike when expired,
//! tampered, of another tenant or deleted, and the GraphQL side — listing, references, runs
//! given files, and deletion.

use std::sync::Arc;
use std::time::Duration;

use forge_core::id::UuidV7Generator;
use forge_core::time::SystemClock;
use forge_files::{Files, FilesParts, FsBlobStore, Policy, RefKeys};
use forge_store_memory::MemoryStore;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

struct FileServer {
    srv: Srv,
    dir: std::path::PathBuf,
}

impl Drop for FileServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn file_server(idle: Duration) -> FileServer {
    let dir =
        std::env::temp_dir().join(format!("forge-srv-files-{}", uuid::Uuid::new_v4().simple()));
    let store = Arc::new(MemoryStore::default());
    let files = Files::new(FilesParts {
        store: store.clone(),
        blobs: Arc::new(FsBlobStore::new(dir.join("blobs")).unwrap()),
        scanner: None,
        retriever: None,
        audit: Some(store.clone()),
        policy: Policy {
            max_bytes: 4_096,
            ..Policy::default()
        },
        staging: dir.join("staging"),
        keys: RefKeys::new(vec![("k1".into(), vec![7; 32])]).unwrap(),
        clock: Arc::new(SystemClock),
        ids: Arc::new(UuidV7Generator),
    })
    .unwrap();
    // Short limits for the stalling client's test, the defaults otherwise.
    let tune: fn(&mut forge_server::ServerConfig) = if idle < Duration::from_secs(1) {
        |c| {
            c.file_limits = forge_server::FileLimits {
                idle: Duration::from_millis(300),
                total: Duration::from_secs(5),
            }
        }
    } else {
        |_| {}
    };
    let srv = start(Opts {
        store: store.clone(),
        files: Some(files),
        tune: Some(tune),
        ..Opts::default()
    })
    .await;
    FileServer { srv, dir }
}

async fn upload(
    srv: &Srv,
    token: Option<&str>,
    name: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut req = srv
        .http
        .post(srv.url(&format!("/files?name={}", urlencode(name))))
        .header("content-type", content_type)
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn uploads_are_inspected_and_refusals_are_clear() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let t = token("acme", "alice", &[]);
    let (status, body) = upload(
        srv,
        Some(&t),
        "notes.md",
        "text/markdown",
        b"# Notes\n\nHello.\n".to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["file"]["media_type"], "text/markdown");
    assert_eq!(body["file"]["created_by"], "alice");
    assert!(body["reference"].as_str().unwrap().starts_with("k1."));

    let (status, _) = upload(srv, None, "x.txt", "text/plain", b"x".to_vec()).await;
    assert_eq!(status, 401, "a token is required");
    for (name, ct, bytes, status, code) in [
        ("empty.txt", "text/plain", vec![], 400, "empty_file"),
        (
            "../../etc/passwd",
            "text/plain",
            b"root".to_vec(),
            400,
            "bad_file_name",
        ),
        (
            "big.txt",
            "text/plain",
            vec![b'a'; 4_097],
            413,
            "file_too_large",
        ),
        (
            "photo.png",
            "image/png",
            b"I am not a picture".to_vec(),
            415,
            "type_mismatch",
        ),
        (
            "page.html",
            "text/html",
            b"<!doctype html><img src=x onerror=\"steal()\">".to_vec(),
            415,
            "active_content",
        ),
    ] {
        let (got, body) = upload(srv, Some(&t), name, ct, bytes).await;
        assert_eq!(got, status, "{name}: {body}");
        assert_eq!(
            body["errors"][0]["extensions"]["code"], code,
            "{name}: {body}"
        );
    }
    let d = srv.gql(&t, "query { files }", json!({})).await;
    assert_eq!(
        d["files"].as_array().unwrap().len(),
        1,
        "only the accepted file: {d}"
    );
    // Every refusal is audited by its code — the one refused from its Content-Length alone, before
    // a byte of the body was read, too.
    let admin = token("acme", "root", &["admin"]);
    let audit = srv
        .gql(
            &admin,
            "{ auditRecords(action: \"file.refused\") }",
            json!({}),
        )
        .await;
    let mut codes: Vec<&str> = audit["auditRecords"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["detail"]["code"].as_str().unwrap())
        .collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        [
            "active_content",
            "bad_file_name",
            "empty_file",
            "file_too_large",
            "type_mismatch"
        ],
        "{audit}"
    );
}

/// A chunked body with no length is cut off one byte past the limit, however much more comes.
#[tokio::test]
async fn a_body_without_a_length_is_cut_off_at_the_limit() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let t = token("acme", "alice", &[]);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..64).map(|_| Ok(vec![b'a'; 1024])).collect();
    let res = srv
        .http
        .post(srv.url("/files?name=stream.txt"))
        .bearer_auth(&t)
        .header("content-type", "text/plain")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await;
    // The server answers 413 and closes; a client may see the answer or the closed connection.
    if let Ok(res) = res {
        assert_eq!(res.status().as_u16(), 413);
    }
    let d = srv.gql(&t, "query { files }", json!({})).await;
    assert_eq!(d["files"], json!([]));
    assert!(
        std::fs::read_dir(fs.dir.join("staging"))
            .unwrap()
            .next()
            .is_none()
    );
}

/// A client that sends its headers and part of its body, then stalls (slowloris), is refused
/// after the idle limit and nothing is kept.
#[tokio::test]
async fn a_stalled_upload_is_refused_and_leaves_nothing() {
    let fs = file_server(Duration::from_millis(300)).await;
    let srv = &fs.srv;
    let t = token("acme", "alice", &[]);
    let mut tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let head = format!(
        "POST /files?name=slow.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
         Content-Type: text/plain\r\nContent-Length: 1000\r\n\r\npart of it"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .expect("the server answers a stalled upload")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("upload_too_slow"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let d = srv.gql(&t, "query { files }", json!({})).await;
    assert_eq!(d["files"], json!([]));
}

#[tokio::test]
async fn references_download_once_valid_and_are_refused_alike_otherwise() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let alice = token("acme", "alice", &[]);
    let (_, body) = upload(
        srv,
        Some(&alice),
        "report.txt",
        "text/plain",
        b"The numbers.\n".to_vec(),
    )
    .await;
    let id = body["file"]["id"].as_str().unwrap().to_owned();
    let reference = body["reference"].as_str().unwrap().to_owned();

    // A member of the tenant downloads with the reference (bob did not upload it), audited.
    let bob = token("acme", "bob", &[]);
    let res = srv
        .http
        .get(srv.url(&format!("/files/{reference}")))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let admin = token("acme", "root", &["admin"]);
    let audit = srv
        .gql(
            &admin,
            "{ auditRecords(action: \"file.downloaded\") }",
            json!({}),
        )
        .await;
    assert_eq!(audit["auditRecords"][0]["actor"], "bob", "{audit}");
    let h = res.headers().clone();
    assert_eq!(h["content-type"], "text/plain");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(
        h["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    assert_eq!(h["cache-control"], "private, no-store");
    assert_eq!(res.bytes().await.unwrap().as_ref(), b"The numbers.\n");

    let refused = |url: String, bearer: Option<String>| {
        let http = srv.http.clone();
        async move {
            let mut req = http.get(url);
            if let Some(b) = bearer {
                req = req.bearer_auth(b);
            }
            let res = req.send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let mut tampered = reference.clone().into_bytes();
    let i = tampered.len() - 3;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let globex = token("globex", "mallory", &[]);
    let d = srv
        .gql(
            &alice,
            "mutation($id: ID!) { fileReference(id: $id, ttlSeconds: 1) }",
            json!({"id": id}),
        )
        .await;
    let short = d["fileReference"]["reference"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let member = Some(alice.clone());
    let answers = vec![
        refused(srv.url(&format!("/files/{tampered}")), member.clone()).await,
        // No anonymous links: a good reference without a token, with a bad one, or with
        // another tenant's is refused as a bad reference is (issue 73, item 5).
        refused(srv.url(&format!("/files/{reference}")), None).await,
        refused(
            srv.url(&format!("/files/{reference}")),
            Some("not-a-token".into()),
        )
        .await,
        refused(
            srv.url(&format!("/files/{reference}")),
            Some(globex.clone()),
        )
        .await,
        refused(srv.url(&format!("/files/{short}")), member.clone()).await,
        refused(srv.url("/files/not-a-reference"), member.clone()).await,
    ];
    for a in &answers {
        assert_eq!(a, &answers[0], "refused alike");
    }
    assert_eq!(answers[0].0, 404);

    // Another tenant cannot mint a reference or delete; nor can a member of the tenant the file
    // is private to (it has no access label).
    let (code, _) = srv
        .gql_error(
            &globex,
            "mutation($id: ID!) { fileReference(id: $id) }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
    let bob = token("acme", "bob", &[]);
    let (code, _) = srv
        .gql_error(
            &bob,
            "mutation($id: ID!) { deleteFile(id: $id) }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND");
    let d = srv
        .gql(
            &alice,
            "mutation($id: ID!) { deleteFile(id: $id) }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(d["deleteFile"], true);
    assert_eq!(
        refused(srv.url(&format!("/files/{reference}")), member).await,
        answers[0]
    );
}

#[tokio::test]
async fn a_run_is_given_an_uploaded_file() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let t = token("acme", "alice", &[]);
    let (_, body) = upload(
        srv,
        Some(&t),
        "brief.txt",
        "text/plain",
        b"Be brief.\n".to_vec(),
    )
    .await;
    let id = body["file"]["id"].as_str().unwrap().to_owned();
    let thread = srv.thread(&t).await;
    let d = srv
        .gql(
            &t,
            "mutation($t: ID!, $f: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\", files: [$f]}) { id } }",
            json!({"t": thread, "f": id}),
        )
        .await;
    let run = d["startRun"]["id"].as_str().unwrap().to_owned();
    srv.wait_status(&t, &run, "completed").await;
    let d = srv
        .gql(
            &t,
            "query($t: ID!) { thread(id: $t) { messages { nodes { parts } } } }",
            json!({"t": thread}),
        )
        .await;
    let first = &d["thread"]["messages"]["nodes"][0]["parts"];
    assert_eq!(first[1]["type"], "file", "{first}");
    assert_eq!(first[1]["name"], "brief.txt");
    assert_eq!(first[1]["trust"], "untrusted");
    let (code, _) = srv
        .gql_error(
            &token("globex", "m", &[]),
            "mutation($t: ID!, $f: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\", files: [$f]}) { id } }",
            json!({"t": srv.thread(&token("globex", "m", &[])).await, "f": id}),
        )
        .await;
    assert_eq!(code, "NOT_FOUND", "another tenant's file");
}

/// Files inside one tenant (issue 62, item 11): a file without an access label is its
/// uploader's alone — another member neither lists it, nor references, attaches or deletes it,
/// and is told it does not exist; a labelled file is everyone's the policy says (the default
/// policy: everyone in the tenant), though only its uploader and administrators delete it.
#[tokio::test]
async fn members_of_one_tenant_have_only_the_files_they_may_read() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let alice = token("acme", "alice", &[]);
    let bob = token("acme", "bob", &[]);
    let admin = token("acme", "root", &["admin"]);
    let (status, private) = upload(
        srv,
        Some(&alice),
        "salary.txt",
        "text/plain",
        b"Alice earns a lot.\n".to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{private}");
    assert!(private["file"].get("label").is_none(), "{private}");
    let res = srv
        .http
        .post(srv.url("/files?name=handbook.txt&label=team"))
        .bearer_auth(&alice)
        .header("content-type", "text/plain")
        .body(b"Be kind.\n".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let shared: Value = res.json().await.unwrap();
    assert_eq!(shared["file"]["label"], "team");
    let private = private["file"]["id"].as_str().unwrap().to_owned();
    let shared = shared["file"]["id"].as_str().unwrap().to_owned();

    let listed = |d: Value| -> Vec<String> {
        d["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mine = listed(srv.gql(&alice, "query { files }", json!({})).await);
    assert_eq!(mine.len(), 2, "the uploader lists both: {mine:?}");
    let theirs = listed(srv.gql(&bob, "query { files }", json!({})).await);
    assert_eq!(
        theirs,
        std::slice::from_ref(&shared),
        "bob lists only the labelled one"
    );

    // Referencing, attaching and deleting the private file: as if it did not exist.
    let reference = "mutation($id: ID!) { fileReference(id: $id) }";
    let (code, _) = srv.gql_error(&bob, reference, json!({"id": private})).await;
    assert_eq!(code, "NOT_FOUND");
    let d = srv.gql(&bob, reference, json!({"id": shared})).await;
    assert!(d["fileReference"]["reference"].is_string(), "{d}");
    let thread = srv.thread(&bob).await;
    let start = "mutation($t: ID!, $f: ID!) { startRun(input: {threadId: $t, agent: \"greeter\", message: \"hi\", files: [$f]}) { id } }";
    let (code, message) = srv
        .gql_error(&bob, start, json!({"t": thread, "f": private}))
        .await;
    assert_eq!(code, "NOT_FOUND", "{message}");
    let d = srv
        .gql(&bob, start, json!({"t": thread, "f": shared}))
        .await;
    assert!(d["startRun"]["id"].is_string(), "{d}");
    let delete = "mutation($id: ID!) { deleteFile(id: $id) }";
    let (code, _) = srv.gql_error(&bob, delete, json!({"id": private})).await;
    assert_eq!(code, "NOT_FOUND");
    let (code, _) = srv.gql_error(&bob, delete, json!({"id": shared})).await;
    assert_eq!(code, "FORBIDDEN", "bob reads it but did not upload it");

    // An administrator deletes what others uploaded, private or not.
    let d = srv.gql(&admin, delete, json!({"id": private})).await;
    assert_eq!(d["deleteFile"], true);
    let mine = listed(srv.gql(&alice, "query { files }", json!({})).await);
    assert_eq!(mine, [shared], "{mine:?}");
}

/// An access label is checked before a byte of the body is read.
#[tokio::test]
async fn a_bad_access_label_is_refused() {
    let fs = file_server(Duration::from_secs(10)).await;
    let srv = &fs.srv;
    let alice = token("acme", "alice", &[]);
    for label in ["", "a%0Ab", &"x".repeat(65)] {
        let res = srv
            .http
            .post(srv.url(&format!("/files?name=a.txt&label={label}")))
            .bearer_auth(&alice)
            .header("content-type", "text/plain")
            .body(b"a\n".to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 400, "{label:?}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "bad_label",
            "{body}"
        );
    }
}
