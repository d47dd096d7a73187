//! [`Element`]: the one description of a value the library sums, shared by every algorithm on
//! the primitives (the collectives' packed-word sums, the switch channels' emulated reduction,
//! the executor's reductions, expert parallelism's combine).
//!
//! An element is a scalar lane type (`f32`, `i32`, `u32`, `f16`, `bf16` (of `half`)) or a vector of one
//! ([`crate::vec`]). Sums are lane-wise, each lane one addition rounded to nearest even
//! (integers wrap); on nvptx64 the packed f16 and bf16 words use `add.rn.f16x2` /
//! `add.rn.bf16x2`, elsewhere the lanes add in f32 and round back, which gives the same bits
//! (f32 has more than twice the precision plus two bits, so rounding twice equals rounding
//! once).

use crate::vec::{Bf16x2, Bf16x4, Bf16x8, F16x2, F16x4, F16x8, F32x2, F32x4};
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// A value that sums lane by lane: a scalar lane type or a vector of one. Sealed: the crate's
/// types are the ones with a sum the GPU and the host agree on.
pub trait Element: Copy + bytemuck::Pod + sealed::Sealed {
    /// The name as kernels and tables spell it (`"f32"`, `"bf16"`, `"f16x8"`, ...).
    const NAME: &'static str;
    /// Lanes in one value (1 for a scalar).
    const LANES: usize;
    /// The 32-bit value holding whole lanes of this type (`f32` for the f32 vectors, [`F16x2`]
    /// for f16 lanes, ...): what a packed 32-bit word of these elements is.
    type Word: Element;
    /// Lane-wise sum, each lane rounded once (integers wrap).
    fn add(self, other: Self) -> Self;
    /// Lane `i` (below [`Element::LANES`]) as f32: exact for the float types, `as` for integers.
    fn lane_f32(self, i: usize) -> f32;
    /// The value whose lanes are `lanes[..LANES]`, each rounded to nearest even (integers: `as`).
    fn from_f32_lanes(lanes: &[f32]) -> Self;

    /// The lane-wise sum of two 32-bit words of these elements.
    #[inline(always)]
    fn add_words(a: u32, b: u32) -> u32 {
        let (a, b): (Self::Word, Self::Word) = (bytemuck::cast(a), bytemuck::cast(b));
        bytemuck::cast(a.add(b))
    }

    /// The lane-wise sum of two 64-bit words of these elements (two 32-bit words each).
    #[inline(always)]
    fn add_dwords(a: u64, b: u64) -> u64 {
        Self::add_words(a as u32, b as u32) as u64 | (Self::add_words((a >> 32) as u32, (b >> 32) as u32) as u64) << 32
    }
}

macro_rules! scalars {
    ($($t:ty, $name:literal, $word:ty, |$a:ident, $b:ident| $add:expr, |$x:ident| $to:expr, |$f:ident| $from:expr;)*) => { $(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const LANES: usize = 1;
            type Word = $word;
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                let ($a, $b) = (self, other);
                $add
            }
            #[inline(always)]
            fn lane_f32(self, _i: usize) -> f32 {
                let $x = self;
                $to
            }
            #[inline(always)]
            fn from_f32_lanes(lanes: &[f32]) -> Self {
                let $f = lanes[0];
                $from
            }
        }
    )* };
}

scalars! {
    f32, "f32", f32, |a, b| a + b, |x| x, |f| f;
    i32, "i32", i32, |a, b| a.wrapping_add(b), |x| x as f32, |f| f as i32;
    u32, "u32", u32, |a, b| a.wrapping_add(b), |x| x as f32, |f| f as u32;
    f16, "f16", F16x2, |a, b| f16::from_f32(a.to_f32() + b.to_f32()), |x| x.to_f32(), |f| f16::from_f32(f);
    bf16, "bf16", Bf16x2, |a, b| bf16::from_f32(a.to_f32() + b.to_f32()), |x| x.to_f32(), |f| bf16::from_f32(f);
}

macro_rules! vectors {
    ($($t:ident, $lane:ty, $name:literal, $word:ty;)*) => { $(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const LANES: usize = $t::LANES;
            type Word = $word;
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                vector_add!($t, self, other)
            }
            #[inline(always)]
            fn lane_f32(self, i: usize) -> f32 {
                self.0[i].lane_f32(0)
            }
            #[inline(always)]
            fn from_f32_lanes(lanes: &[f32]) -> Self {
                $t(core::array::from_fn(|i| <$lane>::from_f32_lanes(&lanes[i..])))
            }
        }
    )* };
}

/// Lane-wise sum of two vectors; the one-word f16 and bf16 vectors use the packed instruction
/// on nvptx64.
macro_rules! vector_add {
    (F16x2, $a:expr, $b:expr) => {
        packed_add!(F16x2, add_rn_f16x2, $a, $b)
    };
    (Bf16x2, $a:expr, $b:expr) => {
        packed_add!(Bf16x2, add_rn_bf16x2, $a, $b)
    };
    ($t:ident, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        $t(core::array::from_fn(|i| a.0[i].add(b.0[i])))
    }};
}

macro_rules! packed_add {
    ($t:ident, $insn:ident, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        #[cfg(target_arch = "nvptx64")]
        {
            bytemuck::cast(crate::ptx::arith::$insn(bytemuck::cast(a), bytemuck::cast(b)))
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            $t([a.0[0].add(b.0[0]), a.0[1].add(b.0[1])])
        }
    }};
}

vectors! {
    F32x2, f32, "f32x2", f32;
    F32x4, f32, "f32x4", f32;
    F16x2, f16, "f16x2", F16x2;
    F16x4, f16, "f16x4", F16x2;
    F16x8, f16, "f16x8", F16x2;
    Bf16x2, bf16, "bf16x2", Bf16x2;
    Bf16x4, bf16, "bf16x4", Bf16x2;
    Bf16x8, bf16, "bf16x8", Bf16x2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_sums_round_once() {
        // 1 + 2^-11 is a tie in f16: rounds to even (1.0).
        let one = f16::from_f32(1.0).to_bits() as u32;
        let tiny = f16::from_f32(2f32.powi(-11)).to_bits() as u32;
        assert_eq!(
            f16::add_words(one | one << 16, tiny | one << 16),
            one | (f16::from_f32(2.0).to_bits() as u32) << 16
        );
        let b = bf16::from_f32(3.0).to_bits() as u32;
        assert_eq!(bf16::add_words(b, b) & 0xffff, bf16::from_f32(6.0).to_bits() as u32);
        assert_eq!(f32::add_words(1.5f32.to_bits(), 2.25f32.to_bits()), 3.75f32.to_bits());
        assert_eq!(i32::add_words(u32::MAX, 2), 1);
        assert_eq!(u32::add_words(u32::MAX, 2), 1);
        assert_eq!(u32::add_dwords(u64::MAX, 1 << 32 | 2), 1);
    }

    #[test]
    fn vectors_add_lane_by_lane() {
        let a = F32x4::new([1.0, 2.0, 3.0, 4.0]);
        assert_eq!(a.add(a), F32x4::new([2.0, 4.0, 6.0, 8.0]));
        let h = Bf16x8::new(core::array::from_fn(|i| bf16::from_f32(i as f32)));
        let s = h.add(h);
        for i in 0..8 {
            assert_eq!(s.lane_f32(i), 2.0 * i as f32);
        }
        assert_eq!(F16x4::from_f32_lanes(&[1.0, 2.0, 3.0, 4.0, 5.0]).lane_f32(3), 4.0);
        // Rounding to nearest even on the way back: 1 + 2^-9 is a tie in bf16.
        assert_eq!(bf16::from_f32_lanes(&[1.0 + 2f32.powi(-8)]).to_f32(), 1.0);
        assert_eq!((F16x8::LANES, <F16x8 as Element>::LANES, f32::LANES), (8, 8, 1));
        assert_eq!((F16x8::NAME, bf16::NAME), ("f16x8", "bf16"));
    }

    #[test]
    fn sums_match_the_exact_sum_rounded_once() {
        // Rounding through f32 equals rounding the exact sum (the exact sum is computed in f64,
        // which holds every sum of two f16 or bf16 values exactly).
        let mut x = 0x1234_5678u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let (a, b) = (f16::from_bits(x as u16), f16::from_bits((x >> 16) as u16));
            if a.is_finite() && b.is_finite() {
                let exact = f16::from_f64(a.to_f64() + b.to_f64());
                assert_eq!(a.add(b).to_bits(), exact.to_bits(), "{a} + {b}");
            }
            let (a, b) = (bf16::from_bits(x as u16), bf16::from_bits((x >> 16) as u16));
            if a.is_finite() && b.is_finite() {
                let exact = bf16::from_f64(a.to_f64() + b.to_f64());
                assert_eq!(a.add(b).to_bits(), exact.to_bits(), "{a} + {b}");
            }
        }
    }
}
