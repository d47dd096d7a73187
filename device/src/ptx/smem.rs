//! The dynamic shared-memory window and conversions between shared and generic addresses.

#[cfg(any(target_arch = "nvptx64", doc))]
use super::{asm, global_asm};

// The launch's dynamic shared memory. One declaration for every kernel that links this crate; the
// host sets its size at launch (above 48 KiB after raising the function's limit).
#[cfg(any(target_arch = "nvptx64", doc))]
global_asm!(".extern .shared .align 128 .b8 mscclpp_dynamic_smem[];");

hand! {
    table = SMEM;

    #[check("mscclpp_dynamic_smem", also ["mov.u32"], sass [],
        no_sass "a shared address built from SR_CgaCtaId with ordinary integer code",
        kernel |p: *mut u32| { *p = dynamic_smem_base(); })]
    /// `mov.u32 d, mscclpp_dynamic_smem;` (PTX 1.0): the 32-bit shared address of the dynamic
    /// shared-memory window (128-byte aligned).
    #[inline(always)]
    pub fn dynamic_smem_base() -> u32 {
        let r: u32;
        // SAFETY: takes the address of a symbol; no memory access.
        unsafe { asm!(concat!("mov.u32 {r}, ", mnemonic!(), ";"), r = out(reg32) r, options(nomem, nostack, pure)) };
        r
    }

    #[check("cvta.shared.u64", sass [], no_sass "address arithmetic",
        kernel |p: *mut u64| { *p = cvta_shared_u64(*(p as *const u32)) as u64; })]
    /// `cvta.shared.u64 d, a;` (PTX 2.0): the generic address of a 32-bit shared address.
    #[inline(always)]
    pub fn cvta_shared_u64(shared: u32) -> *mut u8 {
        let r: u64;
        // SAFETY: an address conversion; no memory access.
        unsafe {
            asm!(
                concat!(mnemonic!(), " {r}, {a};"),
                r = out(reg64) r, a = in(reg64) shared as u64, options(nomem, nostack, pure)
            )
        };
        r as *mut u8
    }
}
