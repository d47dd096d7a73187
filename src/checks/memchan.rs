//! Expectations for the global-memory accesses of the cooperative copies and the LL packets
//! (`mscclpp_device::ptx::ld_st`, the `.global` forms).
//!
//! SASS names from `cuobjdump -sass` of ptxas 13.5's output (sm_90): plain accesses are
//! `LDG.E` / `STG.E` with `.64` or `.128` for 8 and 16 bytes (one 128-bit access for the vector
//! forms); `.volatile` adds `.STRONG.SYS`.

use super::{Check, c};

/// The copy and packet accesses (sm_90 module).
pub const MEMCHAN_CHECKS: &[Check] = &[
    c("ld_global_u32", &["ld.global.u32"], &["LDG.E "]),
    c("st_global_u32", &["st.global.u32"], &["STG.E "]),
    c("ld_global_u64", &["ld.global.u64"], &["LDG.E.64 "]),
    c("st_global_u64", &["st.global.u64"], &["STG.E.64 "]),
    c("ld_global_v4_u32", &["ld.global.v4.u32"], &["LDG.E.128 "]),
    c("st_global_v4_u32", &["st.global.v4.u32"], &["STG.E.128 "]),
    c("ld_volatile_global_v2_u32", &["ld.volatile.global.v2.u32"], &["LDG.E.64.STRONG.SYS"]),
    c("st_volatile_global_v2_u32", &["st.volatile.global.v2.u32"], &["STG.E.64.STRONG.SYS"]),
    c("ld_volatile_global_v4_u32", &["ld.volatile.global.v4.u32"], &["LDG.E.128.STRONG.SYS"]),
    c("st_volatile_global_v4_u32", &["st.volatile.global.v4.u32"], &["STG.E.128.STRONG.SYS"]),
];
