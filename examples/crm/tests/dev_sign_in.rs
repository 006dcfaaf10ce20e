//! `crm serve` as its users start it: development sign-in only when asked (`--dev-sign-in`)
//! and only on a loopback listener unless forced (`--dev-sign-in-anywhere`), and a drain and a
//! clean exit on SIGTERM — Forge's checks for an application server (`forge::testing`).

use forge::testing::{Served, check_server};

/// Starts `crm serve` on `listen` with `args` on a fresh data directory.
fn serve(listen: &str, args: &[&str]) -> Result<Served, String> {
    let mut all = vec!["serve", "--listen", listen];
    all.extend_from_slice(args);
    Served::start(env!("CARGO_BIN_EXE_crm"), &all, "crm: listening on ")
}

#[test]
fn serve_passes_forges_checks_for_an_application_server() {
    if let Err(e) = check_server(serve) {
        panic!("{e}");
    }
}
