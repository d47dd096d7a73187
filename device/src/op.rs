//! Reduction operation markers, shared by the bulk reductions
//! ([`crate::bulk::BulkReduceOp`]: `cp.reduce.async.bulk`) and the multimem forms
//! ([`crate::multimem::LdReduce`], [`crate::multimem::Red`]). Each instruction family says which
//! (type, operation) pairs it accepts; an unsupported pair does not compile.

/// `dst = dst + src`
pub struct Add;
/// `dst = min(dst, src)`
pub struct Min;
/// `dst = max(dst, src)`
pub struct Max;
/// `dst = (dst >= src) ? 0 : dst + 1` (u32 only; bulk reductions only)
pub struct Inc;
/// `dst = (dst == 0 || dst > src) ? src : dst - 1` (u32 only; bulk reductions only)
pub struct Dec;
/// `dst = dst & src`
pub struct And;
/// `dst = dst | src`
pub struct Or;
/// `dst = dst ^ src`
pub struct Xor;
