//! Discovery: which tools a scope may learn about — offered to the model, listed, found by search.
//!
//! Every path that reveals a tool goes through `Engine::discoverable` (in `engine::discovery`), which asks the policy
//! port with `PolicyAction::Discover`. Search scores are computed over the visible tools only,
//! so a hidden tool cannot even shift another tool's score.

use std::collections::BTreeSet;

use forge_core::ports::tool::{ApprovalPolicy, ToolClassification, ToolSpec};
use serde::Serialize;

/// A tool as a listing shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolEntry {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// What it does to the world.
    pub classification: ToolClassification,
    /// When it needs approval.
    pub approval: ApprovalPolicy,
    /// Its version.
    pub version: String,
}

impl From<&ToolSpec> for ToolEntry {
    fn from(s: &ToolSpec) -> Self {
        Self {
            name: s.name.clone(),
            description: s.description.clone(),
            classification: s.classification,
            approval: s.approval,
            version: s.version.clone(),
        }
    }
}

/// Why a search hit matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SearchSignal {
    /// The whole query is the tool's name.
    NameExact,
    /// A query term is one of the name's words (`send_invoice` has `send` and `invoice`).
    NameTerm {
        /// The term.
        term: String,
    },
    /// A query term is part of the name without being one of its words.
    NameSubstring {
        /// The term.
        term: String,
    },
    /// A query term occurs in the description.
    DescriptionTerm {
        /// The term.
        term: String,
        /// How often.
        count: u32,
    },
}

/// One tool search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSearchHit {
    /// The tool.
    pub entry: ToolEntry,
    /// Its relevance; higher is better. Comparable within one search only.
    pub score: f32,
    /// What matched.
    pub signals: Vec<SearchSignal>,
}

/// Lower-case words of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

const NAME_EXACT: f32 = 10.0;
const NAME_TERM: f32 = 3.0;
const NAME_SUBSTRING: f32 = 1.5;
/// BM25's term-frequency saturation and length normalisation.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Scores `specs` against `query`, best first; tools matching nothing are left out.
pub fn search(specs: &[&ToolSpec], query: &str, limit: usize) -> Vec<ToolSearchHit> {
    let terms: Vec<String> = words(query)
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let whole = query.trim().to_lowercase();
    let docs: Vec<Vec<String>> = specs.iter().map(|s| words(&s.description)).collect();
    let n = docs.len() as f32;
    let avg_len = (docs.iter().map(Vec::len).sum::<usize>() as f32 / n.max(1.0)).max(1.0);
    let mut hits: Vec<ToolSearchHit> = specs
        .iter()
        .zip(&docs)
        .filter_map(|(spec, doc)| {
            let name = spec.name.to_lowercase();
            let name_words = words(&spec.name);
            let mut score = 0.0;
            let mut signals = Vec::new();
            if !whole.is_empty() && name == whole {
                score += NAME_EXACT;
                signals.push(SearchSignal::NameExact);
            }
            for t in &terms {
                if name_words.contains(t) {
                    score += NAME_TERM;
                    signals.push(SearchSignal::NameTerm { term: t.clone() });
                } else if t.len() >= 3 && name.contains(t.as_str()) {
                    score += NAME_SUBSTRING;
                    signals.push(SearchSignal::NameSubstring { term: t.clone() });
                }
                let tf = doc.iter().filter(|w| *w == t).count() as f32;
                if tf > 0.0 {
                    let df = docs.iter().filter(|d| d.contains(t)).count() as f32;
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    let norm = 1.0 - B + B * doc.len() as f32 / avg_len;
                    score += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
                    signals.push(SearchSignal::DescriptionTerm {
                        term: t.clone(),
                        count: tf as u32,
                    });
                }
            }
            (score > 0.0).then(|| ToolSearchHit {
                entry: ToolEntry::from(*spec),
                score,
                signals,
            })
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.entry.name.cmp(&b.entry.name))
    });
    hits.truncate(limit);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            classification: ToolClassification::Read,
            approval: ApprovalPolicy::Never,
            version: "1".into(),
            permission: None,
            source: Default::default(),
        }
    }

    #[test]
    fn name_words_outrank_description_mentions() {
        let a = spec("send_invoice", "Sends an invoice to a customer by email.");
        let b = spec("lookup", "Looks up a customer; can find an invoice number.");
        let c = spec("weather", "Today's weather.");
        let hits = search(&[&a, &b, &c], "invoice", 10);
        let names: Vec<_> = hits.iter().map(|h| h.entry.name.as_str()).collect();
        assert_eq!(names, ["send_invoice", "lookup"]);
        assert!(hits[0].signals.contains(&SearchSignal::NameTerm {
            term: "invoice".into()
        }));
        assert!(hits[1].signals.contains(&SearchSignal::DescriptionTerm {
            term: "invoice".into(),
            count: 1
        }));
    }

    #[test]
    fn the_exact_name_wins_and_limits_hold() {
        let a = spec("pay", "Pays a payee.");
        let b = spec("pay_invoice", "Pays an invoice.");
        let hits = search(&[&b, &a], "pay", 1);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].entry.name, "pay");
        assert_eq!(hits[0].signals[0], SearchSignal::NameExact);
        assert!(search(&[&a, &b], "zebra", 10).is_empty());
        assert!(search(&[&a, &b], "", 10).is_empty());
    }

    #[test]
    fn substrings_count_for_longer_terms_only() {
        let a = spec("geocoder", "Finds places.");
        let hits = search(&[&a], "code", 10);
        assert_eq!(
            hits[0].signals,
            [SearchSignal::NameSubstring {
                term: "code".into()
            }]
        );
        assert!(search(&[&a], "co", 10).is_empty());
    }
}
