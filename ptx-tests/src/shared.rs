//! Values that a kernel produces and a host test expects, written once: the kernels use this
//! module, and the host tests include the same file (`#[path = ".../ptx-tests/src/shared.rs"]`),
//! so the two sides cannot drift apart. Plain functions of their arguments; no device code.

use mscclpp_device::trigger::{ProxyTrigger, Request};

/// A 32-bit mixing function (every input bit affects every output bit).
#[inline(always)]
pub fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// Word `k` of the message that side `side` sends in round `round` of a test seeded with `seed`:
/// different for every (side, round, word), so a stale or misplaced word is caught.
#[inline(always)]
pub fn message_word(seed: u32, side: u32, round: u32, k: u32) -> u32 {
    mix(seed ^ mix(round.wrapping_mul(2).wrapping_add(side)) ^ k.wrapping_mul(0x9e37_79b9))
}

/// The trigger pushed by thread `g` as its `i`-th: an atomic-add request whose three fields all
/// derive from (g, i), so a torn or misplaced trigger is detected by the consumer.
#[inline(always)]
pub fn tagged_trigger(g: u32, i: u32) -> ProxyTrigger {
    match ProxyTrigger::encode(Request::AtomicAdd {
        dst_offset: g ^ i.wrapping_mul(0x9e37_79b9),
        value: ((g as u64) << 32) | i as u64,
        dst_memory: (g + i) & 511,
    }) {
        Ok(t) => t,
        Err(e) => mscclpp_device::poll::fail(e.message()),
    }
}
