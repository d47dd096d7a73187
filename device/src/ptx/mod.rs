//! The only place in the crate with inline assembly: one thin `#[inline(always)]` function per
//! PTX instruction form, grouped by mnemonic family. Each wrapper's doc starts with the exact PTX
//! it emits and the PTX ISA version / target that introduced it, and carries the mnemonic as a
//! search alias.
//!
//! Conventions:
//! * names follow the mnemonic (`mbarrier_try_wait_parity`, `ld_acquire_sys_u64`);
//! * anything that orders memory or starts asynchronous work is emitted without `pure`/`nomem`;
//! * predicates are declared inside `{ .reg .pred p; ... selp ... }` blocks, loops stay in Rust;
//! * shared-memory operands of the mbarrier and bulk-copy wrappers are
//!   [`SharedPtr`](crate::ptr::SharedPtr)s (32-bit `.shared::cta` addresses; `SharedPtr<u64>`
//!   for an `mbarrier` object); `smem`'s conversions take and return the plain `u32` that
//!   `ptr::SharedPtr` wraps (`ptr` builds on them); global operands are 64-bit generic addresses
//!   of global memory.
//!
//! Every wrapper is a row of a macro ([`check`] describes them): the row makes the wrapper, its
//! check kernel (feature `check-kernels`) and its entry in [`CHECKS`], which the repository's
//! PTX/SASS tests read; a coverage test there fails when a public wrapper has no entry.
//!
//! The wrappers are compiled for nvptx64 only; on other targets the module holds [`CHECKS`] alone.
//! Documentation built for any other target (as docs.rs builds it) sees the wrappers too, through
//! `cfg(doc)`: there `asm!`, `global_asm!` and the nvptx intrinsics are replaced by placeholders,
//! so no nvptx assembly is ever parsed or compiled for the host, and rustdoc, which generates no
//! code, renders the signatures and docs unchanged.

#[macro_use]
mod rows;

pub mod check;

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
#[cfg(all(not(target_arch = "nvptx64"), doc))]
use host_doc::{asm, global_asm, nvptx};

/// Every wrapper's check, in the order of the modules above (`sm_90` and `sm_100a` forms; see
/// [`check::Check::target`]).
pub const CHECKS: &[check::Check] = &check::concat::<{ check::total(TABLES) }>(TABLES);

/// The rows' tables, one per macro invocation (a table left out here leaves its wrappers without
/// a check, which the repository's coverage test reports).
const TABLES: &[&[check::Check]] = &[
    arith::ARITH,
    atom_red::ATOM,
    atom_red::ATOM_MAX,
    atom_red::ATOM_INC,
    atom_red::RED,
    cp_async_bulk::COPIES,
    cp_async_bulk::COMMIT,
    cp_async_bulk::WAIT,
    cp_async_bulk::REDUCE,
    fence::FENCES,
    ld_st::SCOPED_LOADS,
    ld_st::SCOPED_STORES,
    ld_st::GLOBAL_LOADS,
    ld_st::GLOBAL_STORES,
    mbarrier::MBARRIER,
    misc::CONTROL,
    misc::GRID_DEPENDENCIES,
    multimem::LD_REDUCE_RELAXED,
    multimem::LD_REDUCE_ACC_F32,
    multimem::LD_REDUCE_ACQUIRE,
    multimem::ST_RELAXED,
    multimem::ST_RELEASE,
    multimem::RED_RELAXED,
    multimem::RED_RELEASE,
    multimem::LD_REDUCE_FP8,
    multimem::ST_FP8,
    print::PRINT,
    smem::SMEM,
    sreg::SREG,
];

/// Placeholders for documentation builds on other targets (`cfg(doc)`); never compiled to code.
#[cfg(all(not(target_arch = "nvptx64"), doc))]
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
