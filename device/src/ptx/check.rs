//! What each wrapper must compile to.
//!
//! Every wrapper of [`ptx`](super) comes from a *row*: one line of a family macro (`atom!`,
//! `ld_reduce!`, ...) or one hand-written function under a `#[check(..)]` header in `hand!`
//! (`device/src/ptx/rows.rs` defines the macros). From the row the macros make
//!
//! * the wrapper, with `#[doc(alias = "<mnemonic>")]` and its instruction built from the row's
//!   mnemonic (a family macro writes the `asm!` template; a hand row's body takes the mnemonic from
//!   `mnemonic!()`),
//! * its check kernel `check_<wrapper>`, a minimal `extern "ptx-kernel"` function that calls it
//!   (compiled for nvptx64 with feature `check-kernels` only, for the repository's PTX/SASS
//!   checks), and
//! * its [`Check`], on every target: the repository's harness reads [`CHECKS`](super::CHECKS) on
//!   the host, assembles the check kernels with `ptxas` and compares.

/// The expectation for one wrapper's check kernel: its PTX body must hold each [`Check::ptx`] text
/// as whole tokens, hold none of [`Check::forbid`], call nothing (unless [`Check::callee`]), stay
/// short, assemble with `ptxas` for [`Check::target`], and its SASS must hold each
/// [`Check::sass`] text as whole tokens and none of [`Check::forbid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// The wrapper's name in `mscclpp_device::ptx::*`.
    pub wrapper: &'static str,
    /// The check kernel's name, `check_<wrapper>`.
    pub kernel: &'static str,
    /// The `ptxas -arch` the kernel is checked for: `sm_90`, or `sm_100a` for the forms that need it
    /// (their wrappers and kernels exist with feature `sm100a` only).
    pub target: &'static str,
    /// Texts that must appear in the kernel's PTX instructions, as whole tokens; the first is the
    /// row's mnemonic (absent for the device messages, which are calls).
    pub ptx: &'static [&'static str],
    /// Texts that must appear in the kernel's SASS, as whole tokens (opcode, and operands where
    /// given); taken from `cuobjdump -sass` of ptxas 13.5's output.
    pub sass: &'static [&'static str],
    /// Texts that must appear nowhere in the kernel's PTX instructions or SASS (substrings): what
    /// tells this wrapper from a near neighbour, such as `multimem` for a unicast store.
    pub forbid: &'static [&'static str],
    /// The function the wrapper calls by design (device messages), if any; any other kernel may
    /// hold no `call` at all.
    pub callee: Option<&'static str>,
    /// Why [`Check::sass`] is empty, when it is (the instruction leaves no distinctive opcode).
    pub no_sass: Option<&'static str>,
}

/// A placeholder for filling arrays in const code.
const EMPTY: Check =
    Check { wrapper: "", kernel: "", target: "", ptx: &[], sass: &[], forbid: &[], callee: None, no_sass: None };

/// How many checks `tables` hold together.
pub(crate) const fn total(tables: &[&[Check]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < tables.len() {
        n += tables[i].len();
        i += 1;
    }
    n
}

/// The checks of `tables`, in order, as one array of `N` (= [`total`]) checks.
pub(crate) const fn concat<const N: usize>(tables: &[&[Check]]) -> [Check; N] {
    let mut out = [EMPTY; N];
    let (mut k, mut i) = (0, 0);
    while i < tables.len() {
        let mut j = 0;
        while j < tables[i].len() {
            out[k] = tables[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(k == N, "concat: N is not the total of the tables");
    out
}

/// The mnemonic of `wrapper`'s row in `table` (its first [`Check::ptx`] text), for the typed
/// layers ([`crate::multimem`], [`crate::bulk`]) that name a wrapper and must state the instruction
/// it emits: evaluated in a constant, a wrapper missing from `table` fails the build on every
/// target, so the name cannot point at a row that does not exist or at another family's row.
pub(crate) const fn mnemonic(table: &[Check], wrapper: &str) -> &'static str {
    let mut i = 0;
    while i < table.len() {
        if same(table[i].wrapper, wrapper) {
            match table[i].ptx.first() {
                Some(m) => return m,
                None => panic!("the wrapper's row has no mnemonic"),
            }
        }
        i += 1;
    }
    panic!("no row in this table for the wrapper")
}

/// `a == b`, in const code.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
