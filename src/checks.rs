//! What every PTX wrapper of `mscclpp_device::ptx` must compile to: the device crate's table
//! [`CHECKS`], which each wrapper's row yields together with the wrapper and its check kernel
//! `check_<wrapper>` (feature `check-kernels`, which `ptx-tests` turns on).
//!
//! Each check kernel must contain each `ptx` text in its body (whole tokens), contain no `call`
//! (unless the wrapper is a call by nature), stay short, assemble with `ptxas -arch=<target>`,
//! and its SASS must contain each `sass` text (whole tokens); `forbid` texts appear in neither.

pub use mscclpp_device::ptx::CHECKS;
pub use mscclpp_device::ptx::check::Check;

/// Every expectation checked against the sm_90 module.
pub fn sm90_checks() -> impl Iterator<Item = &'static Check> {
    CHECKS.iter().filter(|c| c.target == "sm_90")
}

/// Every expectation checked against the sm_100a module (the fp8 multimem forms).
pub fn sm100a_checks() -> impl Iterator<Item = &'static Check> {
    CHECKS.iter().filter(|c| c.target == "sm_100a")
}

/// Every expectation (what the coverage test compares with the wrappers).
pub fn all_checks() -> impl Iterator<Item = &'static Check> {
    CHECKS.iter()
}

/// Kernels of `ptx-tests` (in its `barriers` module) that use a CTA barrier in divergent code,
/// with the number of barriers in their source. Their PTX and their SASS must hold exactly that
/// many barrier instructions: a compiler that copies a barrier into both arms of a branch (legal
/// for an ordinary call, undefined for `bar.sync`, which is `barrier.sync.aligned`) shows up as one
/// more.
pub const BARRIER_COUNTS: &[(&str, usize)] = &[
    // `if leader { init } bar_sync(); if leader { use }`: threading the second test through the
    // first is what copies the barrier.
    ("divergent_bar_sync", 1),
    // The same pattern around `DeviceSyncer::sync` (two barriers inside).
    ("divergent_device_syncer", 2),
];
