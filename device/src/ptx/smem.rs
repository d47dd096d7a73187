//! The dynamic shared-memory window and conversions between shared and generic addresses.

use super::{asm, global_asm};

// The launch's dynamic shared memory. One declaration for every kernel that links this crate; the
// host sets its size at launch (above 48 KiB after raising the function's limit).
global_asm!(".extern .shared .align 128 .b8 mscclpp_dynamic_smem[];");

/// `mov.u32 d, mscclpp_dynamic_smem;` (PTX 1.0): the 32-bit shared address of the dynamic
/// shared-memory window (128-byte aligned).
#[inline(always)]
pub fn dynamic_smem_base() -> u32 {
    let r: u32;
    // SAFETY: takes the address of a symbol; no memory access.
    unsafe { asm!("mov.u32 {r}, mscclpp_dynamic_smem;", r = out(reg32) r, options(nomem, nostack, pure)) };
    r
}

/// `cvta.shared.u64 d, a;` (PTX 2.0): the generic address of a 32-bit shared address.
#[inline(always)]
pub fn cvta_shared_u64(shared: u32) -> *mut u8 {
    let r: u64;
    // SAFETY: an address conversion; no memory access.
    unsafe {
        asm!("cvta.shared.u64 {r}, {a};", r = out(reg64) r, a = in(reg64) shared as u64, options(nomem, nostack, pure))
    };
    r as *mut u8
}

/// `cvta.to.shared.u64 d, a;` (PTX 2.0): the 32-bit shared address of a generic pointer into this
/// CTA's shared memory.
#[inline(always)]
pub fn cvta_to_shared_u64(generic: *const u8) -> u32 {
    let r: u64;
    // SAFETY: an address conversion; no memory access.
    unsafe {
        asm!("cvta.to.shared.u64 {r}, {a};", r = out(reg64) r, a = in(reg64) generic as u64, options(nomem, nostack, pure))
    };
    r as u32
}
