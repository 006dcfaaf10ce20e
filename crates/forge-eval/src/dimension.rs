//! The dimensions quality is measured along. Every case counts toward one or more; scores,
//! thresholds and the trend are kept per dimension.

use serde::{Deserialize, Serialize};

/// One evaluation dimension. The wire name is kebab-case (`external-action-safety`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dimension {
    /// The agent did what was asked.
    TaskCompletion,
    /// It chose the right workflow and tools (and left the wrong ones alone).
    ToolSelection,
    /// Nobody saw or did what they were not entitled to.
    Authorization,
    /// Nothing acted on the outside world without the consent it needed.
    ExternalActionSafety,
    /// A structured answer matched the agent's output schema.
    StructuredOutput,
    /// Answers cited the exact sources that support them.
    Groundedness,
    /// The answer is good for the application's domain (brand, tone, correctness in context).
    DomainQuality,
    /// Latency, cost and time to first token stayed within budget.
    LatencyCost,
    /// After a provider, tool, worker or network failure the run still ended correctly.
    Recovery,
}

impl Dimension {
    /// Every dimension, in the order tables list them.
    pub const ALL: [Dimension; 9] = [
        Dimension::TaskCompletion,
        Dimension::ToolSelection,
        Dimension::Authorization,
        Dimension::ExternalActionSafety,
        Dimension::StructuredOutput,
        Dimension::Groundedness,
        Dimension::DomainQuality,
        Dimension::LatencyCost,
        Dimension::Recovery,
    ];

    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Dimension::TaskCompletion => "task-completion",
            Dimension::ToolSelection => "tool-selection",
            Dimension::Authorization => "authorization",
            Dimension::ExternalActionSafety => "external-action-safety",
            Dimension::StructuredOutput => "structured-output",
            Dimension::Groundedness => "groundedness",
            Dimension::DomainQuality => "domain-quality",
            Dimension::LatencyCost => "latency-cost",
            Dimension::Recovery => "recovery",
        }
    }

    /// The dimension with this wire name.
    pub fn parse(name: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_parse() {
        for d in Dimension::ALL {
            let json = serde_json::to_string(&d).expect("serialize");
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(Dimension::parse(d.name()), Some(d));
            assert_eq!(
                serde_json::from_str::<Dimension>(&json).expect("deserialize"),
                d
            );
        }
        assert_eq!(Dimension::parse("vibes"), None);
    }
}
