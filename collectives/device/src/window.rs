//! The one-shot allreduce written on a symmetric memory window
//! ([`Window`](mscclpp_device::window::Window)): the same result as
//! the one-shot LL allreduce of [`Collective`](crate::Collective), bit for bit (sums in rank
//! order), in a few dozen lines of the window API.
//!
//! ```text
//!  window of each rank: [ half 0: region 0 | ... | region n-1 ][ half 1: ... ]   regions of max_bytes
//!  block b of rank r, launch e (its slot b counts its launches):
//!    put_signal(p, half e&1, region r, part b of the input, slot b)   for every rank p (r too)
//!    wait until slot b from every rank q has reached e
//!    part b of output = region 0 + region 1 + ... + region n-1        (rank order, its own window)
//! ```
//!
//! No closing barrier: launch `e + 2` writes half `e & 1` again only after every rank's block
//! signalled launch `e + 1`, which its grid starts after launch `e` ended on that rank (stream
//! order). Every launch on one window uses the same grid (each block's slot counts its launches),
//! at most the window's `slots` blocks, all co-resident on every rank.

/// Bytes of the window for `n_ranks` ranks and messages of at most `max_bytes` (two halves of
/// one region per rank).
pub const fn window_bytes(n_ranks: u32, max_bytes: u64) -> u64 {
    2 * n_ranks as u64 * max_bytes
}

/// Block `b`'s part of `bytes` (a multiple of 16) in a grid of `blocks`: `(offset, length)`,
/// whole 16-byte vectors, the first blocks one vector more.
pub const fn block_part(bytes: u64, blocks: u32, b: u32) -> (u64, u64) {
    let (vecs, blocks, b) = (bytes / 16, blocks as u64, b as u64);
    let (base, extra) = (vecs / blocks, vecs % blocks);
    let start = b * base + if b < extra { b } else { extra };
    (start * 16, (base + if b < extra { 1 } else { 0 }) * 16)
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::*;
    use mscclpp_device::copy::Threads;
    use mscclpp_device::device_assert;
    use mscclpp_device::poll::SpinBudget;
    use mscclpp_device::ptr::GlobalPtr;
    use mscclpp_device::ptx::sreg;
    use mscclpp_device::vec::F32x4;
    use mscclpp_device::window::{Scope, Window};

    /// One-shot allreduce (sum) of `bytes` of f32 on window `w`: `output` = the sum over ranks
    /// of `input`, in rank order. Every thread of every block calls it.
    ///
    /// # Safety
    /// `w` a live window of [`window_bytes`]`(w.size, max_bytes)` or more with at least as many
    /// slots as blocks, used only by this allreduce, every launch with the same 1-D co-resident
    /// grid on every rank; `input` and `output` 16-byte aligned, valid for `bytes` (a multiple of
    /// 16, at most `max_bytes`, both checked with `ASSERTS`), not overlapping.
    #[inline(always)]
    pub unsafe fn allreduce_window_f32(
        w: &Window,
        input: GlobalPtr<u8>,
        output: GlobalPtr<u8>,
        bytes: u64,
        max_bytes: u64,
        budget: SpinBudget,
    ) {
        device_assert!(bytes.is_multiple_of(16) && bytes <= max_bytes, "window allreduce: size");
        device_assert!(window_bytes(w.size, max_bytes) <= w.bytes, "window allreduce: window too small");
        let (n, me, b) = (w.size, w.rank, sreg::ctaid_x());
        let (off, len) = block_part(bytes, sreg::nctaid_x(), b);
        // SAFETY: the caller's contract: slot b exists, every region lies in the window (sizes
        // checked above), every block of every rank runs this; the signal of slot b orders each
        // put before the reads of its region, and the halves alternate (module docs).
        unsafe {
            // This block's launch number: its own signal to itself counts the launches before.
            let e = w.signal_value(b, me) + 1;
            let region = |r: u32| ((e & 1) * n as u64 + r as u64) * max_bytes + off;
            for k in 0..n {
                let p = if me + k < n { me + k } else { me + k - n }; // from the next rank on
                w.put_signal(p, region(me), input.byte_add(off as usize), len, b, Scope::Block);
            }
            if Scope::Block.is_leader() {
                for q in 0..n {
                    w.wait_signal(b, q, e, budget);
                }
            }
            Scope::Block.sync();
            for i in Threads::block().stride(len / 16) {
                let at = |r: u32| w.local::<F32x4>(region(r) + i * 16).as_ptr();
                let mut acc = at(0).read().0;
                for r in 1..n {
                    let v = at(r).read().0;
                    for l in 0..4 {
                        acc[l] += v[l];
                    }
                }
                output.byte_add((off + i * 16) as usize).cast::<F32x4>().as_ptr().write(F32x4(acc));
            }
        }
    }
}

#[cfg(target_arch = "nvptx64")]
pub use device::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_parts_tile_the_message_in_vectors() {
        for bytes in [0u64, 16, 48, 1024, 16 * 1001, 64 << 20] {
            for blocks in [1u32, 2, 3, 16, 132] {
                let mut next = 0;
                for b in 0..blocks {
                    let (off, len) = block_part(bytes, blocks, b);
                    assert_eq!(off, next, "{bytes} B over {blocks}: block {b} starts where {} ended", b.max(1) - 1);
                    assert!(len.is_multiple_of(16));
                    next = off + len;
                }
                assert_eq!(next, bytes);
            }
        }
        assert_eq!(window_bytes(8, 64 << 20), 1 << 30);
    }
}
