//! Packed half-precision arithmetic (the sums of the collectives).

#[cfg(any(target_arch = "nvptx64", doc))]
use super::asm;

hand! {
    table = ARITH;

    // a + b as fma(a, 1, b)
    #[check("add.rn.f16x2", sass ["HFMA2.MMA"], kernel |p: *mut u32| { *p.add(2) = add_rn_f16x2(*p, *p.add(1)); })]
    /// `add.rn.f16x2 d, a, b;` (PTX 4.2, sm_53): lane-wise sum of two pairs of IEEE half-precision
    /// values, each rounded to nearest even. Lane 0 is in bits 0..16.
    #[inline(always)]
    pub fn add_rn_f16x2(a: u32, b: u32) -> u32 {
        let d: u32;
        // SAFETY: register arithmetic only.
        unsafe {
            asm!(
                concat!(mnemonic!(), " {d}, {a}, {b};"),
                d = out(reg32) d, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack)
            )
        };
        d
    }

    #[check("add.rn.bf16x2", sass ["HFMA2.MMA.BF16_V2"],
        kernel |p: *mut u32| { *p.add(2) = add_rn_bf16x2(*p, *p.add(1)); })]
    /// `add.rn.bf16x2 d, a, b;` (PTX 7.8, sm_90): lane-wise sum of two pairs of bfloat16 values,
    /// each rounded to nearest even. Lane 0 is in bits 0..16.
    #[inline(always)]
    pub fn add_rn_bf16x2(a: u32, b: u32) -> u32 {
        let d: u32;
        // SAFETY: register arithmetic only.
        unsafe {
            asm!(
                concat!(mnemonic!(), " {d}, {a}, {b};"),
                d = out(reg32) d, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack)
            )
        };
        d
    }
}
