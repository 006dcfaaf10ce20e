//! Native tools that ship with the `forge` binary, so example agents work out of the box.

use std::collections::HashMap;
use std::sync::Arc;

use forge_core::ports::tool::{ApprovalPolicy, Tool, ToolClassification, ToolError};
use forge_engine::native_tool;
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An arithmetic operation.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// Input of `calculate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CalculateInput {
    /// The operation.
    op: Op,
    /// Left operand.
    a: i64,
    /// Right operand.
    b: i64,
}

/// Output of `calculate`.
#[derive(Debug, Serialize)]
struct CalculateOutput {
    result: i64,
}

fn calculate(i: CalculateInput) -> Result<CalculateOutput, ToolError> {
    let overflow = || ToolError::Failed("the result does not fit in a 64-bit integer".into());
    let result = match i.op {
        Op::Add => i.a.checked_add(i.b).ok_or_else(overflow)?,
        Op::Sub => i.a.checked_sub(i.b).ok_or_else(overflow)?,
        Op::Mul => i.a.checked_mul(i.b).ok_or_else(overflow)?,
        Op::Div if i.b == 0 => return Err(ToolError::Failed("division by zero".into())),
        Op::Div => i.a.checked_div(i.b).ok_or_else(overflow)?,
    };
    Ok(CalculateOutput { result })
}

/// Input of `lookup`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LookupInput {
    /// The key to look up.
    key: String,
}

/// Input of `pay_invoice`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PayInput {
    /// The invoice's number.
    invoice: String,
    /// The amount, in whole currency units.
    amount: u64,
}

/// The example payments ledger `pay_invoice` writes to: in this process, standing in for a
/// payment service that records each payment under the idempotency key it was sent. A call
/// delivered again with its key is not charged again; `charges` counts the payments an invoice
/// has (2 would mean a repeated call was charged twice), `deliveries` how often this call came.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    payments: Mutex<HashMap<String, Payment>>,
}

#[derive(Debug, Clone)]
struct Payment {
    invoice: String,
    amount: u64,
    receipt: String,
    deliveries: u32,
}

/// What `pay_invoice` answers.
#[derive(Debug, Serialize)]
struct Paid {
    invoice: String,
    amount: u64,
    receipt: String,
    charges: usize,
    deliveries: u32,
}

impl Ledger {
    fn pay(&self, key: &str, input: PayInput) -> Paid {
        let mut payments = self.payments.lock();
        let n = payments.len() + 1;
        let entry = payments.entry(key.to_owned()).or_insert_with(|| Payment {
            receipt: format!("rcpt-{n:04}"),
            invoice: input.invoice,
            amount: input.amount,
            deliveries: 0,
        });
        entry.deliveries += 1;
        let paid = entry.clone();
        let charges = payments
            .values()
            .filter(|p| p.invoice == paid.invoice)
            .count();
        Paid {
            invoice: paid.invoice,
            amount: paid.amount,
            receipt: paid.receipt,
            charges,
            deliveries: paid.deliveries,
        }
    }
}

/// Every built-in tool, `pay_invoice` writing to a ledger of its own.
pub(crate) fn tools() -> Vec<Arc<dyn Tool>> {
    tools_with(Arc::new(Ledger::default()))
}

/// Every built-in tool: `calculate`; `lookup` (the benchmark workload's tool: a constant answer
/// for any key); and `pay_invoice`, the example external write (payments agent), on `ledger`.
pub(crate) fn tools_with(ledger: Arc<Ledger>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(
            native_tool(
                "pay_invoice",
                "Pays an invoice (an example external write, recorded in this process's example \
                 ledger once per call, however often the call is delivered).",
                move |ctx, input: PayInput| {
                    let ledger = ledger.clone();
                    async move { Ok::<_, ToolError>(ledger.pay(&ctx.idempotency_key.0, input)) }
                },
            )
            .classification(ToolClassification::ExternalWrite)
            .approval(ApprovalPolicy::Policy)
            .permission("payments.write"),
        ),
        Arc::new(native_tool(
            "calculate",
            "Integer arithmetic: add, sub, mul or div of a and b.",
            |_ctx, input: CalculateInput| async move { calculate(input) },
        )),
        Arc::new(native_tool(
            "lookup",
            "Looks a key up in the reference table.",
            |_ctx, input: LookupInput| async move {
                Ok::<_, ToolError>(serde_json::json!({ "key": input.key, "value": "v" }))
            },
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_charges_once_per_key_and_counts_deliveries() {
        let ledger = Ledger::default();
        let pay = |key: &str| {
            ledger.pay(
                key,
                PayInput {
                    invoice: "INV-1".into(),
                    amount: 5,
                },
            )
        };
        let first = pay("k1");
        let again = pay("k1");
        assert_eq!((first.charges, first.deliveries), (1, 1));
        assert_eq!(
            (again.charges, again.deliveries, again.receipt),
            (1, 2, first.receipt)
        );
        let other_key = pay("k2");
        assert_eq!(other_key.charges, 2, "another key is another payment");
    }

    #[test]
    fn calculate_checks_overflow_and_zero() {
        let r = |op, a, b| calculate(CalculateInput { op, a, b }).map(|o| o.result);
        assert_eq!(r(Op::Mul, 12, 7), Ok(84));
        assert_eq!(r(Op::Sub, 1, 3), Ok(-2));
        assert_eq!(
            r(Op::Div, 1, 0),
            Err(ToolError::Failed("division by zero".into()))
        );
        assert!(r(Op::Mul, i64::MAX, 2).is_err());
        assert!(r(Op::Div, i64::MIN, -1).is_err());
    }
}
