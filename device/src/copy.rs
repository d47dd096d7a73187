//! Cooperative copies: every thread of a group calls the same copy with its own index, and the
//! group shares the bytes.
//!
//! ```text
//!  elements of W bytes:  [ 0 ][ 1 ][ 2 ] ... [ n-1 ] [tail < W bytes]
//!  thread t of T takes:    t, t+T, t+2T, ...           bytes t, t+T, ... of the tail
//! ```
//!
//! * [`copy`]`::<W>`: whole elements of `W` = 4, 8 or 16 bytes (one `ld.global` / `st.global` of
//!   that width each); both addresses `W`-aligned and `bytes` a multiple of `W`.
//! * [`copy_with_remainder`]`::<W>`: the same, then the `bytes % W` bytes after the last whole
//!   element one byte at a time (the tail may end at any address).
//! * [`copy_widest`]: any addresses and size. When `dst` and `src` have the same offset modulo
//!   16 (or 8, or 4), it copies the bytes up to that boundary one by one and the rest with
//!   16-byte (8-byte, 4-byte) elements; otherwise byte by byte.
//!
//! Nothing here waits or orders memory: synchronise the group (a `bar.sync`, a grid barrier)
//! before other threads use the result, and signal a peer only after that.

/// The threads sharing one cooperative operation: this thread's `index` in `0..count`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Threads {
    /// This thread's index in the group.
    pub index: u32,
    /// How many threads share the work.
    pub count: u32,
}

impl Threads {
    /// Thread `index` of a group of `count` threads.
    #[inline(always)]
    pub const fn new(index: u32, count: u32) -> Self {
        Self { index, count }
    }

    /// This thread's share of `0..end`: `index`, `index + count`, `index + 2 * count`, ... below
    /// `end`, as a `u32`, `u64` or `usize` (the type of `end`). The grid-stride loop, once:
    ///
    /// ```
    /// # use mscclpp_device::copy::Threads;
    /// let t = Threads::new(1, 3);
    /// assert!(t.stride(8u64).eq([1, 4, 7]));
    /// ```
    ///
    /// `for i in t.stride(n) { .. }` compiles to the same loop as the hand-written
    /// `let mut i = t.index; while i < n { ..; i += t.count }`: no bounds check, the same compare
    /// and add. A `count` of 0 never ends, as that loop would not; nor does an `end` above the
    /// type's maximum minus `count` (the index wraps, as it would there).
    #[inline(always)]
    pub fn stride<I: StrideIndex>(self, end: I) -> Stride<I> {
        Stride { last: I::from_u32(self.index), add: 0, count: self.count, end }
    }
}

/// The indices one thread of a [`Threads`] group takes from `0..end`: [`Threads::stride`].
#[derive(Clone, Debug)]
pub struct Stride<I> {
    last: I,
    // 0 before the first index, then `count`: `next` adds first, so the loop carries one index
    // (as the hand-written one does), and the count is widened only where it is added (as in
    // `i += t.count as u64`).
    add: u32,
    count: u32,
    end: I,
}

impl<I: StrideIndex> Iterator for Stride<I> {
    type Item = I;

    #[inline(always)]
    fn next(&mut self) -> Option<I> {
        // Wrapping, as `i += count` is in a release build.
        self.last = self.last.wrapping_add(I::from_u32(self.add));
        self.add = self.count;
        if self.last < self.end { Some(self.last) } else { None }
    }
}

/// An index type of [`Threads::stride`]: `u32`, `u64` or `usize` (sealed).
pub trait StrideIndex: Copy + PartialOrd + sealed::Index {
    /// A thread index or count as this type.
    #[doc(hidden)]
    fn from_u32(v: u32) -> Self;
    /// `self + other`, wrapping.
    #[doc(hidden)]
    fn wrapping_add(self, other: Self) -> Self;
}

macro_rules! stride_indices {
    ($($t:ty),*) => { $(
        impl sealed::Index for $t {}
        impl StrideIndex for $t {
            #[inline(always)]
            fn from_u32(v: u32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn wrapping_add(self, other: Self) -> Self {
                <$t>::wrapping_add(self, other)
            }
        }
    )* };
}

stride_indices!(u32, u64, usize);

#[cfg(any(target_arch = "nvptx64", doc))]
impl Threads {
    /// The calling thread within its (1-D) block.
    #[inline(always)]
    pub fn block() -> Self {
        use crate::ptx::sreg;
        Self { index: sreg::tid_x(), count: sreg::ntid_x() }
    }
    /// The calling thread within the whole (1-D) grid of 1-D blocks.
    #[inline(always)]
    pub fn grid() -> Self {
        use crate::ptx::sreg;
        let n = sreg::ntid_x();
        Self { index: sreg::ctaid_x() * n + sreg::tid_x(), count: sreg::nctaid_x() * n }
    }
}

/// An element width the copies accept: `Width<4>`, `Width<8>` or `Width<16>`.
pub struct Width<const W: usize>;

mod sealed {
    pub trait Sealed {}
    pub trait Index {}
}

/// Implemented by the element widths the copies accept (sealed): `copy::<3>` does not compile.
///
/// ```compile_fail
/// fn needs<const W: usize>() where mscclpp_device::copy::Width<W>: mscclpp_device::copy::Element {}
/// needs::<3>();
/// ```
pub trait Element: sealed::Sealed {
    /// The register value of one element.
    #[doc(hidden)]
    type Value: Copy;
    /// One load of an element.
    ///
    /// # Safety
    /// `p` valid for the element's size in the global state space and aligned to it.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn load(p: *const u8) -> Self::Value;
    /// One store of an element.
    ///
    /// # Safety
    /// As for `load`, for writes.
    #[cfg(any(target_arch = "nvptx64", doc))]
    #[doc(hidden)]
    unsafe fn store(p: *mut u8, v: Self::Value);
}

macro_rules! widths {
    ($($w:literal => $v:ty, $ld:ident, $st:ident, $elem:ty;)*) => { $(
        impl sealed::Sealed for Width<$w> {}
        impl Element for Width<$w> {
            type Value = $v;
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn load(p: *const u8) -> $v {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::ld_st::$ld(p.cast::<$elem>()) }
            }
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            unsafe fn store(p: *mut u8, v: $v) {
                // SAFETY: forwarded from the caller.
                unsafe { crate::ptx::ld_st::$st(p.cast::<$elem>(), v) }
            }
        }
    )* };
}

widths! {
    4 => u32, ld_global_u32, st_global_u32, u32;
    8 => u64, ld_global_u64, st_global_u64, u64;
    16 => [u32; 4], ld_global_v4_u32, st_global_v4_u32, u32;
}

/// The widest element (16, 8, 4 or 1 bytes) that two addresses with these offsets can share:
/// the largest `w` with `dst ≡ src (mod w)`.
pub const fn common_width(dst: u64, src: u64) -> u64 {
    let d = dst ^ src;
    if d.is_multiple_of(16) {
        16
    } else if d.is_multiple_of(8) {
        8
    } else if d.is_multiple_of(4) {
        4
    } else {
        1
    }
}

/// How [`copy_widest`] splits a copy: `(head, width)`, the bytes copied one by one before
/// `dst + head` is `width`-aligned (at most `bytes`), and the element width of the rest.
pub const fn widest_split(dst: u64, src: u64, bytes: u64) -> (u64, u64) {
    let w = common_width(dst, src);
    if w == 1 {
        return (bytes, 1);
    }
    let head = (w - dst % w) % w;
    (if head < bytes { head } else { bytes }, w)
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::device_assert;
    use crate::ptr::GlobalPtr;

    /// How many element copies one thread keeps in flight per loop step.
    const UNROLL: u64 = 4;

    /// Copies `n` elements of width `W` (no checks).
    #[inline(always)]
    unsafe fn elements<const W: usize>(dst: *mut u8, src: *const u8, n: u64, t: Threads)
    where
        Width<W>: Element,
    {
        let w = W as u64;
        let step = t.count as u64;
        let mut i = t.index as u64;
        // Loads first, then stores: UNROLL independent loads in flight per thread.
        while i + (UNROLL - 1) * step < n {
            // SAFETY: the caller guarantees both ranges hold `n` aligned elements; every index
            // here is below `n`.
            unsafe {
                let a = <Width<W>>::load(src.add((i * w) as usize));
                let b = <Width<W>>::load(src.add(((i + step) * w) as usize));
                let c = <Width<W>>::load(src.add(((i + 2 * step) * w) as usize));
                let d = <Width<W>>::load(src.add(((i + 3 * step) * w) as usize));
                <Width<W>>::store(dst.add((i * w) as usize), a);
                <Width<W>>::store(dst.add(((i + step) * w) as usize), b);
                <Width<W>>::store(dst.add(((i + 2 * step) * w) as usize), c);
                <Width<W>>::store(dst.add(((i + 3 * step) * w) as usize), d);
            }
            i += UNROLL * step;
        }
        while i < n {
            // SAFETY: as above.
            unsafe { <Width<W>>::store(dst.add((i * w) as usize), <Width<W>>::load(src.add((i * w) as usize))) };
            i += step;
        }
    }

    /// Copies `n` bytes one at a time (no checks).
    #[inline(always)]
    unsafe fn bytes_one_by_one(dst: *mut u8, src: *const u8, n: u64, t: Threads) {
        for i in t.stride(n) {
            // SAFETY: the caller guarantees both ranges hold `n` bytes.
            unsafe { dst.add(i as usize).write(src.add(i as usize).read()) };
        }
    }

    /// Copies `bytes` (a multiple of `W`) from `src` to `dst` in elements of `W` bytes, shared by
    /// the threads of `t`.
    ///
    /// # Safety
    /// Both ranges valid global memory (local or peer-mapped) that do not overlap; both
    /// addresses `W`-aligned; `bytes` a multiple of `W` (checked in debug/`checks` builds; in
    /// other builds the bytes after the last whole element are left alone). Every thread of the
    /// group calls it with the same arguments and its own index.
    #[inline(always)]
    pub unsafe fn copy<const W: usize>(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, t: Threads)
    where
        Width<W>: Element,
    {
        device_assert!(dst.is_aligned_to(W) && src.is_aligned_to(W), "copy: address not aligned to the element");
        device_assert!(bytes.is_multiple_of(W as u64), "copy: size not a multiple of the element");
        // SAFETY: forwarded from the caller.
        unsafe { elements::<W>(dst.as_ptr(), src.as_ptr(), bytes / W as u64, t) };
    }

    /// [`copy`] for any `bytes`: whole `W`-byte elements, then the remaining `bytes % W` bytes
    /// one at a time.
    ///
    /// # Safety
    /// As for [`copy`], except that `bytes` may be any size.
    #[inline(always)]
    pub unsafe fn copy_with_remainder<const W: usize>(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, t: Threads)
    where
        Width<W>: Element,
    {
        device_assert!(
            dst.is_aligned_to(W) && src.is_aligned_to(W),
            "copy_with_remainder: address not aligned to the element"
        );
        let body = bytes / W as u64 * W as u64;
        // SAFETY: forwarded from the caller; the tail lies inside both ranges.
        unsafe {
            elements::<W>(dst.as_ptr(), src.as_ptr(), body / W as u64, t);
            bytes_one_by_one(dst.as_ptr().add(body as usize), src.as_ptr().add(body as usize), bytes - body, t);
        }
    }

    /// Copies `bytes` from `src` to `dst` with the widest elements their alignments allow (see
    /// [`widest_split`]): any addresses, any size.
    ///
    /// # Safety
    /// Both ranges valid global memory that do not overlap; every thread of the group calls it
    /// with the same arguments and its own index.
    #[inline(always)]
    pub unsafe fn copy_widest(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u64, t: Threads) {
        let (head, w) = widest_split(dst.addr(), src.addr(), bytes);
        let (d, s) = (dst.byte_add(head as usize), src.byte_add(head as usize));
        let rest = bytes - head;
        // SAFETY: forwarded from the caller; `d` and `s` are `w`-aligned by construction.
        unsafe {
            bytes_one_by_one(dst.as_ptr(), src.as_ptr(), head, t);
            match w {
                16 => copy_with_remainder::<16>(d, s, rest, t),
                8 => copy_with_remainder::<8>(d, s, rest, t),
                4 => copy_with_remainder::<4>(d, s, rest, t),
                _ => {}
            }
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
pub use device::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widest_element_follows_relative_alignment() {
        assert_eq!(common_width(0x1000, 0x2000), 16);
        assert_eq!(common_width(0x1003, 0x2003), 16);
        assert_eq!(common_width(0x1008, 0x2000), 8);
        assert_eq!(common_width(0x1004, 0x200c), 8);
        assert_eq!(common_width(0x1004, 0x2000), 4);
        assert_eq!(common_width(0x1001, 0x2000), 1);
    }

    #[test]
    fn split_reaches_the_boundary_or_copies_bytewise() {
        // Same offset 3: 13 bytes by hand, then 16-byte elements.
        assert_eq!(widest_split(0x1003, 0x2003, 100), (13, 16));
        // Shorter than the distance to the boundary: all by hand.
        assert_eq!(widest_split(0x1003, 0x2003, 5), (5, 16));
        assert_eq!(widest_split(0x1000, 0x2000, 5), (0, 16));
        assert_eq!(widest_split(0x100c, 0x2004, 64), (4, 8));
        assert_eq!(widest_split(0x1001, 0x2002, 64), (64, 1));
        assert_eq!(widest_split(0x1000, 0x2000, 0), (0, 16));
        // Every case covers exactly `bytes`: head <= bytes, and the rest starts aligned.
        for d in 0..16u64 {
            for s in 0..16u64 {
                for bytes in [0u64, 1, 3, 15, 16, 17, 100] {
                    let (head, w) = widest_split(d, s, bytes);
                    assert!(head <= bytes);
                    assert!(head == bytes || (d + head).is_multiple_of(w));
                    assert!((d + head) % w == (s + head) % w || head == bytes);
                }
            }
        }
    }

    #[test]
    fn stride_covers_the_range_once_between_the_threads() {
        assert!(Threads::new(1, 3).stride(8u32).eq([1, 4, 7]));
        assert!(Threads::new(2, 3).stride(8usize).eq([2, 5]));
        assert!(Threads::new(5, 8).stride(5u64).eq([]));
        assert!(Threads::new(0, 1).stride(0u64).eq([]));
        // Every index below `end` by exactly one thread of the group.
        for end in [0u64, 1, 7, 64, 100] {
            let mut seen = [0u32; 100];
            for index in 0..7 {
                for i in Threads::new(index, 7).stride(end) {
                    seen[i as usize] += 1;
                }
            }
            assert!(seen.iter().take(end as usize).all(|&n| n == 1), "end {end}");
        }
    }
}
