//! The only place in the crate with inline assembly: one thin `#[inline(always)]` function per
//! PTX instruction form, grouped by mnemonic family. Each wrapper's doc starts with the exact PTX
//! it emits and the PTX ISA version / target that introduced it.
//!
//! Conventions:
//! * names follow the mnemonic (`mbarrier_try_wait_parity`, `ld_acquire_sys_u64`);
//! * anything that orders memory or starts asynchronous work is emitted without `pure`/`nomem`;
//! * predicates are declared inside `{ .reg .pred p; ... selp ... }` blocks, loops stay in Rust;
//! * shared-memory operands are 32-bit `.shared::cta` addresses, global operands 64-bit generic
//!   addresses of global memory.
//!
//! Every public wrapper here has a check kernel in `ptx-tests` and an expectation in the root
//! crate's `checks` table; a coverage test fails when one is missing.
//!
//! The module is compiled for nvptx64 only. Documentation built for any other target (as docs.rs
//! builds it) sees it too, through `cfg(doc)`: there `asm!`, `global_asm!` and the nvptx intrinsics
//! are replaced by placeholders, so no nvptx assembly is ever parsed or compiled for the host, and
//! rustdoc, which generates no code, renders the signatures and docs unchanged.

pub mod arith;
pub mod atom_red;
pub mod cp_async_bulk;
pub mod fence;
pub mod ld_st;
pub mod mbarrier;
pub mod misc;
pub mod multimem;
pub mod print;
pub mod smem;
pub mod sreg;

#[cfg(target_arch = "nvptx64")]
use core::arch::{asm, global_asm, nvptx};
#[cfg(not(target_arch = "nvptx64"))]
use host_doc::{asm, global_asm, nvptx};

/// Placeholders for documentation builds on other targets (`cfg(doc)`); never compiled to code.
#[cfg(not(target_arch = "nvptx64"))]
mod host_doc {
    macro_rules! asm {
        ($($t:tt)*) => {
            ::core::unreachable!("nvptx64 only")
        };
    }
    macro_rules! global_asm {
        ($($t:tt)*) => {};
    }
    pub(crate) use {asm, global_asm};

    /// The special-register intrinsics of `core::arch::nvptx`.
    pub(crate) mod nvptx {
        pub(crate) unsafe fn _thread_idx_x() -> i32 {
            unreachable!("nvptx64 only")
        }
        pub(crate) unsafe fn _block_dim_x() -> i32 {
            unreachable!("nvptx64 only")
        }
        pub(crate) unsafe fn _block_idx_x() -> i32 {
            unreachable!("nvptx64 only")
        }
        pub(crate) unsafe fn _grid_dim_x() -> i32 {
            unreachable!("nvptx64 only")
        }
    }
}
