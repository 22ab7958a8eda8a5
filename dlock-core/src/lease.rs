//! Validation of lease-like durations before they reach Redis.
//!
//! Redis treats a `PEXPIRE` of 0 ms as "delete now" (so an acquire script would report
//! success and a second owner could acquire at once), and a `PEXPIRE` too large for its
//! clock fails *after* the script has written the hash, leaving a lock that never expires.
//! Every duration that becomes a `PEXPIRE` argument goes through [`lease_millis`] first.

use std::time::Duration;

use crate::error::{LockError, Result};

/// The longest lease dlock accepts: 366 days.
///
/// Redis could store longer expiries, but a lock lease beyond a year is almost always a
/// unit mistake, and a bounded value keeps every expiry far from Redis's overflow limits.
pub const MAX_LEASE: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Longest accepted command timeout: 60 s. Every release leaves a memo in Redis for three
/// command timeouts (see `client::Settings::memo_ttl`), so an unbounded timeout would keep memos
/// (and re-entry markers) for as long as it says; a Redis answer that takes a minute is an
/// outage, not a slow command.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The reason given for a duration over [`MAX_LEASE`], written once (a test checks that
/// it names the same number of days).
macro_rules! over_max_lease {
    () => {
        "longer than the maximum of 366 days"
    };
}

/// The reason for a setting over [`MAX_LEASE`].
pub(crate) const OVER_MAX_LEASE: &str = over_max_lease!();

/// The lease of a re-entry: what its script sets, whether the watchdog renews it, and how
/// long its local deadline runs (`None`: the outer hold's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReentryLease {
    /// The script's lease argument; 0 leaves the expiry as it is.
    pub(crate) millis: u64,
    /// The renewal lease, when the watchdog renews the re-entry.
    pub(crate) renewal: Option<Duration>,
    /// The lease its deadline counts from the send time; `None` lives on the outer hold.
    pub(crate) lease: Option<Duration>,
}

/// The rule every primitive's re-entry follows: an explicit lease is never stretched by a
/// re-entry unless the re-entry asks for a longer explicit one itself (`asked`). Without
/// one, inside a watchdog hold (`outer_renewal`) it is renewed like it; inside an explicit
/// lease it lives on that lease (same expiry, no renewal).
pub(crate) fn reentry_lease(
    asked: Option<Duration>,
    outer_renewal: Option<Duration>,
    watchdog: Duration,
) -> Result<ReentryLease> {
    Ok(match (asked, outer_renewal) {
        (Some(lease), _) => ReentryLease {
            millis: lease_millis("lease", lease)?,
            renewal: None,
            lease: Some(lease),
        },
        (None, Some(_)) => ReentryLease {
            millis: lease_millis("lease", watchdog)?,
            renewal: Some(watchdog),
            lease: Some(watchdog),
        },
        (None, None) => ReentryLease {
            millis: 0,
            renewal: None,
            lease: None,
        },
    })
}

/// Converts `lease` to whole milliseconds for `PEXPIRE`, rejecting values Redis would
/// misinterpret. `what` names the setting in the error ("lease", "watchdog_timeout").
pub(crate) fn lease_millis(what: &'static str, lease: Duration) -> Result<u64> {
    let invalid = |reason| LockError::InvalidDuration {
        what,
        value: lease,
        reason,
    };
    if lease > MAX_LEASE {
        return Err(invalid(concat!(
            over_max_lease!(),
            "; use the watchdog (no lease) for long critical sections"
        )));
    }
    let millis = lease.as_millis();
    if millis == 0 {
        return Err(invalid(
            "shorter than 1ms; Redis expiries have millisecond resolution and a 0ms expiry deletes the lock at once",
        ));
    }
    // MAX_LEASE is far below u64::MAX milliseconds, so this cannot truncate.
    Ok(millis as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_maximum() {
        let days = MAX_LEASE.as_secs() / (24 * 60 * 60);
        assert!(
            OVER_MAX_LEASE.ends_with(&format!(" {days} days")),
            "{OVER_MAX_LEASE}"
        );
    }

    #[test]
    fn accepts_whole_milliseconds_and_truncates_fractions() {
        assert_eq!(lease_millis("lease", Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(
            lease_millis("lease", Duration::from_micros(1500)).unwrap(),
            1
        );
        assert_eq!(lease_millis("lease", MAX_LEASE).unwrap(), 31_622_400_000);
    }

    #[test]
    fn rejects_values_redis_would_misread() {
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_LEASE + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = lease_millis("lease", bad).unwrap_err();
            assert!(
                matches!(err, LockError::InvalidDuration { what: "lease", .. }),
                "{bad:?} gave {err}"
            );
        }
    }

    #[test]
    fn error_message_says_what_and_why() {
        let err = lease_millis("watchdog_timeout", Duration::from_micros(500)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid watchdog_timeout 500us: shorter than 1ms; Redis expiries have millisecond resolution and a 0ms expiry deletes the lock at once"
        );
    }
}
