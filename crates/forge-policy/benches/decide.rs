//! What one Cedar decision costs: the engine asks once per agent tool per step (discovery) and
//! once per call (execution, with the input).

#![allow(clippy::unwrap_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use forge_core::ports::policy::{Authorizer, PolicyAction, PolicyRequest, PolicyResource};
use forge_core::ports::tool::{ApprovalPolicy, ToolClassification, ToolSpec};
use forge_core::scope::Scope;
use forge_policy::CedarAuthorizer;
use serde_json::json;

fn decide(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let policies = CedarAuthorizer::from_path(&dir).unwrap();
    let spec = ToolSpec {
        name: "pay_invoice".into(),
        description: "Pays an invoice.".into(),
        input_schema: json!({"type": "object"}),
        classification: ToolClassification::ExternalWrite,
        approval: ApprovalPolicy::Never,
        version: "1".into(),
        permission: Some("payments.write".into()),
        source: Default::default(),
    };
    let scope = Scope::parse("acme", "bob", &["finance", "staff"]).unwrap();
    let input = json!({"invoice": "INV-1", "amount": 200, "memo": "March"});
    c.bench_function("cedar/discover", |b| {
        b.iter(|| {
            policies.decide(&PolicyRequest {
                scope: &scope,
                action: PolicyAction::Discover,
                resource: PolicyResource::Tool(&spec),
                input: None,
            })
        })
    });
    c.bench_function("cedar/execute_with_input", |b| {
        b.iter(|| {
            policies.decide(&PolicyRequest {
                scope: &scope,
                action: PolicyAction::Execute,
                resource: PolicyResource::Tool(&spec),
                input: Some(&input),
            })
        })
    });
}

criterion_group!(benches, decide);
criterion_main!(benches);
