//! A world's fingerprint, the key of the explorer's set of worlds seen.
//!
//! The explorer hashes every world it reaches, several times per distinct one: with the
//! standard library's SipHash (made to resist hostile keys, which a simulator has none
//! of), hashing was a sixth of an exploration's time. Each 8 bytes here are folded into
//! the state with one 64 × 64 → 128-bit multiply, which mixes every input bit into the
//! whole word (the folded multiply of wyhash and aHash); a collision would merge two
//! worlds, so the fingerprint keeps all 64 bits well mixed, and at the explorer's
//! millions of worlds the chance of one is below 10⁻⁶.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// The fingerprints of the worlds seen: already mixed, so the set uses them as they are.
pub(crate) type Seen = HashSet<u64, BuildHasherDefault<AsIs>>;

/// The fingerprint of `value`.
pub(crate) fn of(value: &impl Hash) -> u64 {
    let mut hasher = Folded::default();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Odd constants with about as many one bits as zero bits (from the digits of π).
const SEED: u64 = 0x243f_6a88_85a3_08d3;
const MULTIPLIER: u64 = 0x1319_8a2e_0370_7345;

/// A hasher that folds each word into its state with a wide multiply.
struct Folded {
    state: u64,
}

impl Default for Folded {
    fn default() -> Self {
        Folded { state: SEED }
    }
}

impl Folded {
    fn fold(&mut self, word: u64) {
        let product = u128::from(self.state ^ word) * u128::from(MULTIPLIER);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for Folded {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let word: [u8; 8] = word.try_into().expect("chunks of 8 bytes");
            self.fold(u64::from_le_bytes(word));
        }
        let rest = words.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        // The length in the top byte: "ab" and "ab\0" differ.
        self.fold(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
    }

    fn write_u8(&mut self, n: u8) {
        self.fold(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.fold(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.fold(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.fold(n as u64);
    }

    fn finish(&self) -> u64 {
        // One more fold, so that the last word also reaches every bit.
        let mut last = Folded { state: self.state };
        last.fold(MULTIPLIER);
        last.state
    }
}

/// A hasher for keys that are fingerprints already.
#[derive(Default)]
pub(crate) struct AsIs(u64);

impl Hasher for AsIs {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
