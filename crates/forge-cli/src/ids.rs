//! Ids as people type them: whole, or the unique beginning of one (`forge runs show 01a2519bc2f5`),
//! as git takes a commit's. A beginning is matched against what the command could mean — the
//! tenant's newest runs, its pending interactions, the dead jobs — and must name exactly one;
//! hyphens may be left out. Forge's ids are UUIDv7, whose first characters are a timestamp, so
//! runs made in the same minute share their first eight: a unique beginning is usually 10–13
//! characters.

use std::fmt::Display;
use std::str::FromStr;

/// How many of the newest runs a beginning is matched against.
pub(crate) const RECENT_RUNS: usize = 1_000;

/// The fewest characters a beginning may have.
const MIN_PREFIX: usize = 4;

/// An id as typed: whole, or its beginning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdPrefix(String);

impl FromStr for IdPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let typed = s.trim().to_ascii_lowercase();
        let digits = typed.chars().filter(|c| *c != '-').count();
        let hex = typed.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        if !hex || !(MIN_PREFIX..=32).contains(&digits) {
            return Err(format!(
                "{s:?} is not an id, nor the beginning of one ({MIN_PREFIX} to 32 hex digits)"
            ));
        }
        Ok(Self(typed))
    }
}

impl Display for IdPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl IdPrefix {
    /// The id, when the whole of one was typed.
    pub(crate) fn whole<T: FromStr>(&self) -> Option<T> {
        (self.0.len() == 36).then(|| self.0.parse().ok()).flatten()
    }

    /// The one of `candidates` (all the `what`s it could mean) this begins: not found when
    /// none does, invalid input when several do (naming them).
    pub(crate) fn pick<T: Display + Clone>(
        &self,
        what: &'static str,
        candidates: impl IntoIterator<Item = T>,
    ) -> anyhow::Result<T> {
        let bare = |s: &str| s.replace('-', "");
        let wanted = bare(&self.0);
        let found: Vec<T> = candidates
            .into_iter()
            .filter(|c| bare(&c.to_string()).starts_with(&wanted))
            .collect();
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(forge_core::Error::not_found(what, format!("{}…", self.0)).into()),
            many => Err(forge_core::Error::Invalid(format!(
                "{} {what}s begin with {}: {}; give more of the id",
                many.len(),
                self.0,
                many.iter()
                    .take(5)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into()),
        }
    }
}

/// The run `given` names in `scope`: the whole id, or the beginning of one of the tenant's
/// [`RECENT_RUNS`] newest runs.
pub(crate) async fn run(
    store: &dyn forge_core::ports::store::Store,
    scope: &forge_core::scope::Scope,
    given: &IdPrefix,
) -> anyhow::Result<forge_core::id::RunId> {
    if let Some(id) = given.whole() {
        return Ok(id);
    }
    let recent = store
        .query_runs(
            scope,
            &forge_core::ports::store::RunQuery::newest(RECENT_RUNS),
        )
        .await?;
    given.pick("run", recent.into_iter().map(|r| r.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beginning_names_one_or_says_why_not() {
        let ids = [
            "01a2519b-c2f5-7354-a73a-22eddc035322",
            "01a2519b-c2f5-7354-a73a-22ecf9d76771",
            "01a2519c-0000-7000-8000-000000000001",
        ];
        let p = |s: &str| s.parse::<IdPrefix>().unwrap();
        assert_eq!(p("01a2519c").pick("run", ids).unwrap(), ids[2]);
        assert_eq!(
            p("01A2519BC2F57354A73A22ED").pick("run", ids).unwrap(),
            ids[0]
        );
        let many = p("01a2519b").pick("run", ids).unwrap_err().to_string();
        assert!(many.contains("2 runs begin with 01a2519b: "), "{many}");
        let none = p("ffff").pick("run", ids).unwrap_err();
        assert!(matches!(
            none.downcast_ref::<forge_core::Error>(),
            Some(forge_core::Error::NotFound { .. })
        ));
        assert_eq!(
            p(ids[1]).whole::<uuid::Uuid>().map(|u| u.to_string()),
            Some(ids[1].into())
        );
        assert!("abc".parse::<IdPrefix>().is_err());
        assert!("run-1234".parse::<IdPrefix>().is_err());
        assert!("é1234".parse::<IdPrefix>().is_err());
    }
}
