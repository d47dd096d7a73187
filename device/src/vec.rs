//! Small vector values shared by the host and the GPU: the operands of the vector `multimem`
//! forms (and of any other 32-, 64- or 128-bit vector access).
//!
//! Each type is `#[repr(C)]` over an array of its lanes, aligned to its whole size, so that a
//! buffer of them is a buffer of naturally aligned vector accesses and `ptr.add(i)` steps by one
//! vector. All are [`bytemuck::Pod`]: the host fills buffers of them with `bytemuck::cast_slice`.
//!
//! | type | lanes | bytes | PTX operands it stands for |
//! | --- | --- | --- | --- |
//! | [`F32x2`], [`F32x4`] | f32 | 8, 16 | `.v2.f32`, `.v4.f32` |
//! | [`F16x2`], [`F16x4`], [`F16x8`] | f16 | 4, 8, 16 | `.f16x2` / `.v2.f16`, `.v2.f16x2` / `.v4.f16`, `.v4.f16x2` / `.v8.f16` |
//! | [`Bf16x2`], [`Bf16x4`], [`Bf16x8`] | bf16 | 4, 8, 16 | as for f16 with `bf16` |
//! | [`E4m3x4`], [`E4m3x8`], [`E4m3x16`] | fp8 E4M3 bytes | 4, 8, 16 | `.e4m3x4`, `.v2.e4m3x4`, `.v4.e4m3x4` (sm_100a) |
//! | [`E5m2x4`], [`E5m2x8`], [`E5m2x16`] | fp8 E5M2 bytes | 4, 8, 16 | `.e5m2x4`, `.v2.e5m2x4`, `.v4.e5m2x4` (sm_100a) |
//!
//! Lane 0 is at the lowest address, which is also the low half of the first 32-bit register of
//! the PTX operand (`.f16x2` holds lane 0 in bits 0..16).

use half::{bf16, f16};

macro_rules! vectors {
    ($( $(#[$doc:meta])* $name:ident([$lane:ty; $n:literal]) align $align:literal; )*) => { $(
        $(#[$doc])*
        #[repr(C, align($align))]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name(pub [$lane; $n]);

        impl $name {
            /// Number of lanes.
            pub const LANES: usize = $n;

            /// A vector from its lanes (lane 0 at the lowest address).
            #[inline(always)]
            pub const fn new(lanes: [$lane; $n]) -> Self {
                Self(lanes)
            }
            /// Every lane set to `v`.
            #[inline(always)]
            pub const fn splat(v: $lane) -> Self {
                Self([v; $n])
            }
            /// The lanes.
            #[inline(always)]
            pub const fn lanes(self) -> [$lane; $n] {
                self.0
            }
        }

        impl From<[$lane; $n]> for $name {
            #[inline(always)]
            fn from(lanes: [$lane; $n]) -> Self {
                Self(lanes)
            }
        }

        impl From<$name> for [$lane; $n] {
            #[inline(always)]
            fn from(v: $name) -> Self {
                v.0
            }
        }

        // SAFETY: `repr(C)` over an array of plain numbers, no padding (asserted below), every
        // bit pattern valid; identical on the host and nvptx64.
        unsafe impl crate::abi::DeviceAbi for $name {}

        static_assertions::const_assert_eq!(core::mem::size_of::<$name>(), $n * core::mem::size_of::<$lane>());
        static_assertions::const_assert_eq!(core::mem::align_of::<$name>(), $align);
        static_assertions::const_assert_eq!(core::mem::size_of::<$name>(), $align);
    )* };
}

vectors! {
    /// Two `f32` lanes (8 bytes, 8-aligned): the `.v2.f32` operand.
    F32x2([f32; 2]) align 8;
    /// Four `f32` lanes (16 bytes, 16-aligned): the `.v4.f32` operand.
    F32x4([f32; 4]) align 16;
    /// Two `f16` lanes in one 32-bit word: the `.f16x2` (or `.v2.f16`) operand.
    F16x2([f16; 2]) align 4;
    /// Four `f16` lanes (two words): the `.v2.f16x2` (or `.v4.f16`) operand.
    F16x4([f16; 4]) align 8;
    /// Eight `f16` lanes (four words, 16 bytes): the `.v4.f16x2` (or `.v8.f16`) operand.
    F16x8([f16; 8]) align 16;
    /// Two `bf16` lanes in one 32-bit word: the `.bf16x2` (or `.v2.bf16`) operand.
    Bf16x2([bf16; 2]) align 4;
    /// Four `bf16` lanes (two words): the `.v2.bf16x2` (or `.v4.bf16`) operand.
    Bf16x4([bf16; 4]) align 8;
    /// Eight `bf16` lanes (four words, 16 bytes): the `.v4.bf16x2` (or `.v8.bf16`) operand.
    Bf16x8([bf16; 8]) align 16;
    /// Four fp8 E4M3 values (raw encodings) in one word: the `.e4m3x4` operand (sm_100a).
    E4m3x4([u8; 4]) align 4;
    /// Eight fp8 E4M3 values (two words): the `.v2.e4m3x4` operand (sm_100a).
    E4m3x8([u8; 8]) align 8;
    /// Sixteen fp8 E4M3 values (four words): the `.v4.e4m3x4` operand (sm_100a).
    E4m3x16([u8; 16]) align 16;
    /// Four fp8 E5M2 values (raw encodings) in one word: the `.e5m2x4` operand (sm_100a).
    E5m2x4([u8; 4]) align 4;
    /// Eight fp8 E5M2 values (two words): the `.v2.e5m2x4` operand (sm_100a).
    E5m2x8([u8; 8]) align 8;
    /// Sixteen fp8 E5M2 values (four words): the `.v4.e5m2x4` operand (sm_100a).
    E5m2x16([u8; 16]) align 16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_zero_is_the_low_half_of_the_first_word() {
        let v = F16x2::new([f16::from_f32(1.0), f16::from_f32(-2.0)]);
        let w: u32 = bytemuck::cast(v);
        assert_eq!(w & 0xffff, f16::from_f32(1.0).to_bits() as u32);
        assert_eq!(w >> 16, f16::from_f32(-2.0).to_bits() as u32);
        let b = Bf16x8::splat(bf16::from_f32(3.0));
        let words: [u32; 4] = bytemuck::cast(b);
        assert!(words.iter().all(|&x| x == 0x4040_4040));
        let e = E4m3x16::new(core::array::from_fn(|i| i as u8));
        let ew: [u32; 4] = bytemuck::cast(e);
        assert_eq!(ew[0], 0x0302_0100);
        assert_eq!(ew[3], 0x0f0e_0d0c);
    }

    #[test]
    fn conversions_round_trip() {
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let v: F32x4 = a.into();
        assert_eq!(<[f32; 4]>::from(v), a);
        assert_eq!(v.lanes(), a);
        assert_eq!(F32x4::LANES, 4);
        assert_eq!(F32x2::default(), F32x2::splat(0.0));
        let slice = [F32x2::new([1.0, 2.0]), F32x2::new([3.0, 4.0])];
        let flat: &[f32] = bytemuck::cast_slice(&slice);
        assert_eq!(flat, &[1.0, 2.0, 3.0, 4.0]);
    }
}
