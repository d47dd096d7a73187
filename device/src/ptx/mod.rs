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
