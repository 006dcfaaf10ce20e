//! Native tools that ship with the `forge` binary, so example agents work out of the box.

use std::sync::Arc;

use forge_core::ports::tool::{Tool, ToolError};
use forge_engine::native_tool;
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

/// Every built-in tool: `calculate`, and `lookup` (the benchmark workload's tool: a constant
/// answer for any key).
pub(crate) fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
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
