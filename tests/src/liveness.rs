//! What the liveness test (`tests/tests/handoff/proptest_liveness.rs`) and its worker process
//! (`dlock-liveness`) share: the seeded generator that draws every actor's schedule, the
//! names of one case's keys, and the guard either takes; and the slowly rechecking client
//! every liveness test waits with.

use std::time::Duration;

use dlock::{LockClient, LockError, LockGuard, MultiGuard, SemaphorePermit};

/// A small seeded generator (SplitMix64): the same seed draws the same schedule in the
/// test process and in a worker, whatever crates are in the tree.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator drawing from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// `true` with `percent` % probability.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `items`.
    ///
    /// # Panics
    ///
    /// When `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len() as u64) as usize]
    }

    /// An independent generator for a sub-schedule (an actor's), drawn from this one.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

/// The capacity of every case's semaphore: every process must create it with the same.
pub const SEMAPHORE_PERMITS: u32 = 2;

/// The keys of one case, named after its tag.
#[derive(Debug, Clone)]
pub struct Keys {
    /// Three plain locks in one hash slot (`{<tag>}:a`...), so that same-slot multi-locks
    /// can take any of them together and overlap plain acquisitions.
    pub plain: [String; 3],
    /// A fair lock of its own.
    pub fair: String,
    /// A read-write lock of its own.
    pub rw: String,
    /// A semaphore of [`SEMAPHORE_PERMITS`] of its own.
    pub semaphore: String,
}

impl Keys {
    /// The keys of the case tagged `tag` (letters and digits).
    pub fn new(tag: &str) -> Keys {
        Keys {
            plain: ["a", "b", "c"].map(|k| format!("{{{tag}}}:{k}")),
            fair: format!("fair:{tag}"),
            rw: format!("rw:{tag}"),
            semaphore: format!("sem:{tag}"),
        }
    }
}

/// Any guard an actor of the liveness test takes.
#[derive(Debug)]
pub enum Guard {
    /// A lock's, fair lock's, read or write lock's guard.
    One(LockGuard),
    /// A semaphore's permit.
    Permit(SemaphorePermit),
    /// A multi-lock's guard.
    Multi(MultiGuard),
}

impl Guard {
    /// When the hold's lease runs out, as the guard knows it.
    pub fn deadline(&self) -> std::time::Instant {
        match self {
            Guard::One(g) => g.deadline(),
            Guard::Permit(p) => p.deadline(),
            Guard::Multi(g) => g.deadline(),
        }
    }

    /// Releases the hold (every lock of a multi-lock).
    pub async fn unlock(self) -> Result<(), LockError> {
        match self {
            Guard::One(g) => g.unlock().await,
            Guard::Permit(p) => p.unlock().await,
            Guard::Multi(g) => g.unlock().await,
        }
    }
}

/// A client of `url` whose waiters recheck only every 10 s: a wake-up or hand-off that
/// one of them depends on and misses shows as a 10 s stall.
///
/// # Panics
///
/// If the client cannot connect.
pub async fn slow_recheck(url: &str) -> LockClient {
    LockClient::builder()
        .max_wait_recheck(Duration::from_secs(10))
        .connect(url)
        .await
        .unwrap()
}
