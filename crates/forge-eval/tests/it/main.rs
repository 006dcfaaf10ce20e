//! forge-eval's tests: graders over typed run logs, the harness with a judge and a store, the
//! regression report.

mod compare;
mod gate;
mod graders;
mod harness;
mod log;
