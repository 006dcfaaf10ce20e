//! The benchmark workload's mock model server as a process: `forge-mock-model [ADDR]` (default
//! `127.0.0.1:8089`). Prints the base URL, then serves until killed.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8089".to_owned());
    let mut server = forge_testkit::mock_model::MockModelServer::start_on(&addr, false).await?;
    println!("{}", server.base_url());
    server.wait().await;
    Ok(())
}
