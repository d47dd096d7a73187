//! Reading PTX and `cuobjdump -sass` output: kernel bodies, SASS functions, and the checks of
//! verification tier 3 (instruction text present, no call left, body short, SASS opcodes).
//!
//! By concern: [`ptx`] (PTX text), [`sass`] (SASS text and the tools), [`source`] (scans of the
//! Rust sources), [`cfg`](mod@cfg) (a PTX kernel's control flow) and [`tokens`](mod@tokens) (what both text checks
//! compare). Everything is re-exported here.

pub mod cfg;
pub mod ptx;
pub mod sass;
pub mod source;
#[cfg(test)]
mod tests;
pub mod tokens;

pub use cfg::{Cfg, assert_only_cold_wait_calls};
pub use ptx::{
    Location, MAX_CHECK_BODY, call_symbols, check_ptx, entries, funcs, instructions, locations, noreturn_funcs,
    ptx_barriers, ptx_problems,
};
pub use sass::{check_sass, main_sass_or_skip, opcodes, sass_barriers, sass_functions, sass_problems, tools_or_skip};
pub use source::{
    MacroRow, asm_outside_rows, code_only, inline_asm_lines, inline_asm_uses, macro_rows, public_wrappers,
    repository_rust_files, rust_files,
};
pub use tokens::{holds, names, token_lines, tokens};
