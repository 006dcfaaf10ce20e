//! Time: the [`Timestamp`] type and the [`Clock`] port.
//!
//! Nothing in Forge reads the system clock directly; it asks a [`Clock`], so tests pin time with
//! [`ManualClock`].

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A UTC instant with millisecond precision, written as RFC 3339 on the wire.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct Timestamp(pub DateTime<Utc>);

impl Timestamp {
    /// Builds a timestamp from milliseconds since the Unix epoch.
    pub fn from_unix_millis(ms: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(ms).map(Self)
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// This instant plus `d`, saturating at the far future.
    pub fn plus(&self, d: Duration) -> Self {
        let delta = chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX);
        Self(
            self.0
                .checked_add_signed(delta)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        )
    }

    /// This instant minus `d`, saturating at the far past.
    pub fn minus(&self, d: Duration) -> Self {
        let delta = chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX);
        Self(
            self.0
                .checked_sub_signed(delta)
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            self.0.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    }
}

/// Port: tells the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The real clock, truncated to milliseconds so that stored and wire values agree.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp(Utc::now().trunc_subsecs(3))
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock pinned at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// A clock pinned at 2026-01-01T00:00:00Z.
    pub fn at_2026() -> Self {
        Self::new(
            Timestamp::from_unix_millis(1_767_225_600_000)
                .unwrap_or(Timestamp(DateTime::UNIX_EPOCH)),
        )
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock();
        *now = now.plus(d);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::at_2026();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now().unix_millis() - t0.unix_millis(), 1500);
        assert_eq!(t0.to_string(), "2026-01-01T00:00:00.000Z");
    }
}
