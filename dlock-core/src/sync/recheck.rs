//! How long a waiter sleeps without a message before it tries again: its primitive's
//! recheck interval, spaced out when many tasks of its client wait.
//!
//! A recheck is a try sent in case a message was lost, so its only use is as a fallback;
//! but each waiter rechecking at `max_wait_recheck` whatever the number of waiters made
//! 100,000 waiters with the default 1 s send 100,000 tries a second, all a server can run.
//! A client therefore spaces its waiters' rechecks out to about a thousand a second in
//! all: a waiter's interval is its primitive's, or 1 ms per waiting task of its client
//! ([`RECHECK_SPACING`]) spread over half to one and a half times that, whichever is
//! longer, and never longer than what keeps the waiter's place among the waiters alive
//! (its primitive's `longest`).
//!
//! A place that lives by its waiter's tries (the lock's waiter registry, the promises
//! made to waiters) is made to live as long as the interval planned before each try:
//! see [`Waiter::plan_recheck`](super::wait::Waiter::plan_recheck). Spacing without that
//! was tried and lost registrations: a waiter slept past its own entry and never heard
//! the release.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The mean spacing of a client's waiters' rechecks once many of them wait: about a
/// thousand rechecks a second however many tasks wait.
const RECHECK_SPACING: Duration = Duration::from_millis(1);

/// The longest a recheck is ever spaced out to, whatever a primitive allows: a lost
/// message never costs a waiter more than this.
pub(crate) const LONGEST_SPACED_RECHECK: Duration = Duration::from_secs(60 * 60);

/// How long a waiter's place among the waiters (its registration, the promise it was
/// made) lives past a try after which it sleeps at most `recheck` without a message:
/// three such sleeps and a second, so that two lost or late tries do not cost a live
/// waiter its place. A waiting owner registers again at every try and leaves when it
/// stops waiting (or is passed over once its client is gone): this only bounds the life
/// of a place every client abandoned. The scripts only ever lengthen a registry's life,
/// so a client whose waiters recheck less often keeps its places whatever other
/// clients' tries set.
pub(crate) fn place_lifetime(recheck: Duration) -> Duration {
    recheck
        .saturating_mul(3)
        .saturating_add(Duration::from_secs(1))
        .min(Duration::from_secs(24 * 60 * 60))
}

/// A client's count of waiting tasks, which spaces their rechecks.
#[derive(Default)]
pub(crate) struct RecheckSpacing {
    /// Tasks of the client in an acquisition that waits, from its first try on.
    waiting: AtomicUsize,
    /// Hands each waiter its place in the spread (see [`RecheckSpacing::join`]).
    joined: AtomicU64,
}

impl RecheckSpacing {
    /// Counts a waiting task until the returned place is dropped. Each place gets its
    /// own point in the spread (the golden ratio's fractional parts over successive
    /// waiters), so that waiters that started together do not recheck together.
    pub(crate) fn join(&self) -> SpacedPlace<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let n = self.joined.fetch_add(1, Ordering::Relaxed);
        SpacedPlace {
            spacing: self,
            spread: (n as f64 * 0.618_033_988_749_895).fract(),
        }
    }
}

/// One waiting task's share of its client's rechecks.
pub(crate) struct SpacedPlace<'a> {
    spacing: &'a RecheckSpacing,
    /// Where in `[0, 1)` this waiter's interval lies between half and one and a half
    /// times the mean.
    spread: f64,
}

impl SpacedPlace<'_> {
    /// The waiter's interval now: `base` (its primitive's), or its share of the client's
    /// rechecks, whichever is longer, but no longer than `longest` (what keeps its place
    /// alive) unless `base` is.
    pub(crate) fn interval(&self, base: Duration, longest: Duration) -> Duration {
        let waiting = self.spacing.waiting.load(Ordering::Relaxed);
        spaced(base, longest, waiting, self.spread)
    }
}

impl Drop for SpacedPlace<'_> {
    fn drop(&mut self) {
        self.spacing.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The interval of a waiter at `spread` (in `[0, 1)`) while `waiting` tasks of its client
/// wait: see [`SpacedPlace::interval`].
fn spaced(base: Duration, longest: Duration, waiting: usize, spread: f64) -> Duration {
    let waiting = u32::try_from(waiting).unwrap_or(u32::MAX);
    // `mul_f64` panics on NaN and on results beyond `Duration::MAX`.
    let spread = if spread.is_nan() {
        0.5
    } else {
        spread.clamp(0.0, 1.0)
    };
    let share = RECHECK_SPACING
        .saturating_mul(waiting)
        .min(LONGEST_SPACED_RECHECK)
        .mul_f64(0.5 + spread);
    base.max(share.min(longest).min(LONGEST_SPACED_RECHECK))
}

#[cfg(test)]
mod tests {
    use super::{spaced, RecheckSpacing, LONGEST_SPACED_RECHECK, RECHECK_SPACING};
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);
    const NO_BOUND: Duration = LONGEST_SPACED_RECHECK;

    #[test]
    fn rechecks_keep_their_interval_until_many_tasks_wait_then_spread_out() {
        // A few hundred waiters: the primitive's own interval.
        assert_eq!(spaced(SECOND, NO_BOUND, 0, 0.3), SECOND);
        assert_eq!(spaced(SECOND, NO_BOUND, 600, 0.9), SECOND);
        // 100,000 waiters: about a thousand rechecks a second between them, each waiter
        // somewhere between half and one and a half times the mean interval.
        let mean = RECHECK_SPACING * 100_000;
        assert_eq!(mean, Duration::from_secs(100));
        assert_eq!(spaced(SECOND, NO_BOUND, 100_000, 0.0), mean / 2);
        assert_eq!(spaced(SECOND, NO_BOUND, 100_000, 0.5), mean);
        assert!(spaced(SECOND, NO_BOUND, 100_000, 0.999_999) < mean * 3 / 2);
    }

    #[test]
    fn a_primitive_bounds_the_spacing_but_never_its_own_interval() {
        // A fair lock's entry lives 30 s: its waiters recheck every 10 s at the most.
        let ten = Duration::from_secs(10);
        assert_eq!(spaced(SECOND, ten, 100_000, 0.5), ten);
        // A base longer than the bound stays.
        assert_eq!(
            spaced(Duration::from_secs(20), ten, 100_000, 0.5),
            Duration::from_secs(20)
        );
        // Whatever the count, a lost message costs at most an hour.
        assert_eq!(
            spaced(SECOND, Duration::MAX, usize::MAX, 0.9),
            LONGEST_SPACED_RECHECK
        );
    }

    #[test]
    fn out_of_range_spreads_and_counts_are_clamped_never_a_panic() {
        let mean = RECHECK_SPACING * 100_000;
        assert_eq!(spaced(SECOND, NO_BOUND, 100_000, 7.0), mean * 3 / 2);
        assert_eq!(spaced(SECOND, NO_BOUND, 100_000, f64::NAN), mean);
        assert_eq!(spaced(SECOND, NO_BOUND, 100_000, -1.0), mean / 2);
        assert_eq!(
            spaced(Duration::MAX, Duration::ZERO, usize::MAX, 0.5),
            Duration::MAX
        );
    }

    #[test]
    fn a_place_counts_while_it_lives_and_successive_places_spread() {
        let spacing = RecheckSpacing::default();
        let places: Vec<_> = (0..3_000).map(|_| spacing.join()).collect();
        let intervals: Vec<_> = places
            .iter()
            .map(|place| place.interval(Duration::ZERO, NO_BOUND))
            .collect();
        let (shortest, longest) = (
            intervals.iter().min().copied().unwrap(),
            intervals.iter().max().copied().unwrap(),
        );
        assert!(shortest < Duration::from_millis(1_550), "{shortest:?}");
        assert!(longest > Duration::from_millis(4_450), "{longest:?}");
        drop(places);
        // The places left: the next waiter is the only one counted.
        let alone = spacing.join().interval(Duration::ZERO, NO_BOUND);
        assert!(alone <= RECHECK_SPACING * 3 / 2, "{alone:?}");
    }
}
