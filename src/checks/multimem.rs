//! Expectations for the multimem wrappers (`mscclpp_device::ptx::multimem`).
//!
//! SASS names from `cuobjdump -sass` of ptxas 13.5's output:
//!
//! * `multimem.ld_reduce` is `LDGMC.E.<op>.<type>[.RN].STRONG.SYS` (`.acc::f32` shows as
//!   `F32ADD` at sm_90, `.acc::f16` as `HPADD` at sm_100a); acquire adds `CCTL.IVALL` after it.
//! * `multimem.red` is `REDG.E.<op>.<type>...STRONG.SYS` (f32 adds show `.FTZ`); on 32-bit
//!   integer adds and min/max ptxas first combines the warp's values (`VOTEU.ANY`, `REDUX`).
//! * `multimem.st` is an ordinary strong store, `STG.E[.64|.128].STRONG.SYS`: the multicast is in
//!   the address, so only the PTX half tells it from a unicast `st.relaxed.sys`.
//! * release forms put `MEMBAR.ALL.SYS` (then `ERRBAR`, `CGAERRBAR`) before the access.
//!
//! The PTX texts end with a space so that `.v2.f16` does not also match `.v2.f16x2`.

use super::{Check, c};

/// The multimem wrappers of the sm_90 module: every `.relaxed.sys` form ptxas accepts (69
/// `ld_reduce` including 12 `.acc::f32`, 22 `st`, 53 `red`) and the 20 ordering variants.
pub const MULTIMEM_CHECKS: &[Check] = &[
    c(
        "multimem_ld_reduce_relaxed_sys_add_u32",
        &["multimem.ld_reduce.relaxed.sys.global.add.u32 "],
        &["LDGMC.E.ADD.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_s32",
        &["multimem.ld_reduce.relaxed.sys.global.add.s32 "],
        &["LDGMC.E.ADD.S32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_u64",
        &["multimem.ld_reduce.relaxed.sys.global.add.u64 "],
        &["LDGMC.E.ADD.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_f32",
        &["multimem.ld_reduce.relaxed.sys.global.add.f32 "],
        &["LDGMC.E.ADD.F32.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_f32",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.f32 "],
        &["LDGMC.E.ADD.F32x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_f32",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.f32 "],
        &["LDGMC.E.ADD.F32x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_f64",
        &["multimem.ld_reduce.relaxed.sys.global.add.f64 "],
        &["LDGMC.E.ADD.F64.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.f16x2 "],
        &["LDGMC.E.ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.f16x2 "],
        &["LDGMC.E.ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.f16x2 "],
        &["LDGMC.E.ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.f16 "],
        &["LDGMC.E.ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.f16 "],
        &["LDGMC.E.ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v8_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v8.f16 "],
        &["LDGMC.E.ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.bf16x2 "],
        &["LDGMC.E.ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.bf16x2 "],
        &["LDGMC.E.ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2 "],
        &["LDGMC.E.ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.bf16 "],
        &["LDGMC.E.ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.bf16 "],
        &["LDGMC.E.ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v8_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.v8.bf16 "],
        &["LDGMC.E.ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_u32",
        &["multimem.ld_reduce.relaxed.sys.global.min.u32 "],
        &["LDGMC.E.MIN.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_s32",
        &["multimem.ld_reduce.relaxed.sys.global.min.s32 "],
        &["LDGMC.E.MIN.S32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_u64",
        &["multimem.ld_reduce.relaxed.sys.global.min.u64 "],
        &["LDGMC.E.MIN.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_s64",
        &["multimem.ld_reduce.relaxed.sys.global.min.s64 "],
        &["LDGMC.E.MIN.S64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.f16x2 "],
        &["LDGMC.E.MIN.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.f16x2 "],
        &["LDGMC.E.MIN.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.f16x2 "],
        &["LDGMC.E.MIN.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_f16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.f16 "],
        &["LDGMC.E.MIN.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_f16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.f16 "],
        &["LDGMC.E.MIN.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v8_f16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v8.f16 "],
        &["LDGMC.E.MIN.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.bf16x2 "],
        &["LDGMC.E.MIN.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.bf16x2 "],
        &["LDGMC.E.MIN.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.bf16x2 "],
        &["LDGMC.E.MIN.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.bf16 "],
        &["LDGMC.E.MIN.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.bf16 "],
        &["LDGMC.E.MIN.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v8_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.min.v8.bf16 "],
        &["LDGMC.E.MIN.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_u32",
        &["multimem.ld_reduce.relaxed.sys.global.max.u32 "],
        &["LDGMC.E.MAX.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_s32",
        &["multimem.ld_reduce.relaxed.sys.global.max.s32 "],
        &["LDGMC.E.MAX.S32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_u64",
        &["multimem.ld_reduce.relaxed.sys.global.max.u64 "],
        &["LDGMC.E.MAX.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_s64",
        &["multimem.ld_reduce.relaxed.sys.global.max.s64 "],
        &["LDGMC.E.MAX.S64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.f16x2 "],
        &["LDGMC.E.MAX.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.f16x2 "],
        &["LDGMC.E.MAX.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2 "],
        &["LDGMC.E.MAX.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_f16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.f16 "],
        &["LDGMC.E.MAX.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_f16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.f16 "],
        &["LDGMC.E.MAX.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v8_f16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v8.f16 "],
        &["LDGMC.E.MAX.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.bf16x2 "],
        &["LDGMC.E.MAX.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.bf16x2 "],
        &["LDGMC.E.MAX.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.bf16x2 "],
        &["LDGMC.E.MAX.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.bf16 "],
        &["LDGMC.E.MAX.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.bf16 "],
        &["LDGMC.E.MAX.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v8_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.max.v8.bf16 "],
        &["LDGMC.E.MAX.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_and_b32",
        &["multimem.ld_reduce.relaxed.sys.global.and.b32 "],
        &["LDGMC.E.AND.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_and_b64",
        &["multimem.ld_reduce.relaxed.sys.global.and.b64 "],
        &["LDGMC.E.AND.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_or_b32",
        &["multimem.ld_reduce.relaxed.sys.global.or.b32 "],
        &["LDGMC.E.OR.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_or_b64",
        &["multimem.ld_reduce.relaxed.sys.global.or.b64 "],
        &["LDGMC.E.OR.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_xor_b32",
        &["multimem.ld_reduce.relaxed.sys.global.xor.b32 "],
        &["LDGMC.E.XOR.32.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_xor_b64",
        &["multimem.ld_reduce.relaxed.sys.global.xor.b64 "],
        &["LDGMC.E.XOR.64.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.f16x2 "],
        &["LDGMC.E.F32ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.f16x2 "],
        &["LDGMC.E.F32ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2 "],
        &["LDGMC.E.F32ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.f16 "],
        &["LDGMC.E.F32ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16 "],
        &["LDGMC.E.F32ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_f16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v8.f16 "],
        &["LDGMC.E.F32ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2 "],
        &["LDGMC.E.F32ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.bf16x2 "],
        &["LDGMC.E.F32ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2 "],
        &["LDGMC.E.F32ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v2.bf16 "],
        &["LDGMC.E.F32ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16 "],
        &["LDGMC.E.F32ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_bf16",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v8.bf16 "],
        &["LDGMC.E.F32ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_u32",
        &["multimem.ld_reduce.acquire.sys.global.add.u32 "],
        &["LDGMC.E.ADD.32.STRONG.SYS", "CCTL.IVALL"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_s32",
        &["multimem.ld_reduce.acquire.sys.global.add.s32 "],
        &["LDGMC.E.ADD.S32.STRONG.SYS", "CCTL.IVALL"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_u64",
        &["multimem.ld_reduce.acquire.sys.global.add.u64 "],
        &["LDGMC.E.ADD.64.STRONG.SYS", "CCTL.IVALL"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_f32",
        &["multimem.ld_reduce.acquire.sys.global.add.f32 "],
        &["LDGMC.E.ADD.F32.RN.STRONG.SYS", "CCTL.IVALL"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_v2_f32",
        &["multimem.ld_reduce.acquire.sys.global.add.v2.f32 "],
        &["LDGMC.E.ADD.F32x2.RN.STRONG.SYS", "CCTL.IVALL"],
    ),
    c(
        "multimem_ld_reduce_acquire_sys_add_v4_f32",
        &["multimem.ld_reduce.acquire.sys.global.add.v4.f32 "],
        &["LDGMC.E.ADD.F32x4.RN.STRONG.SYS", "CCTL.IVALL"],
    ),
    c("multimem_st_relaxed_sys_u32", &["multimem.st.relaxed.sys.global.u32 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_s32", &["multimem.st.relaxed.sys.global.s32 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_u64", &["multimem.st.relaxed.sys.global.u64 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_s64", &["multimem.st.relaxed.sys.global.s64 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_b32", &["multimem.st.relaxed.sys.global.b32 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_b64", &["multimem.st.relaxed.sys.global.b64 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_f32", &["multimem.st.relaxed.sys.global.f32 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_f32", &["multimem.st.relaxed.sys.global.v2.f32 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_f32", &["multimem.st.relaxed.sys.global.v4.f32 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_f64", &["multimem.st.relaxed.sys.global.f64 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_f16x2", &["multimem.st.relaxed.sys.global.f16x2 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_f16x2", &["multimem.st.relaxed.sys.global.v2.f16x2 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_f16x2", &["multimem.st.relaxed.sys.global.v4.f16x2 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_f16", &["multimem.st.relaxed.sys.global.v2.f16 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_f16", &["multimem.st.relaxed.sys.global.v4.f16 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v8_f16", &["multimem.st.relaxed.sys.global.v8.f16 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_bf16x2", &["multimem.st.relaxed.sys.global.bf16x2 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_bf16x2", &["multimem.st.relaxed.sys.global.v2.bf16x2 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_bf16x2", &["multimem.st.relaxed.sys.global.v4.bf16x2 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_bf16", &["multimem.st.relaxed.sys.global.v2.bf16 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_bf16", &["multimem.st.relaxed.sys.global.v4.bf16 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v8_bf16", &["multimem.st.relaxed.sys.global.v8.bf16 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_release_sys_u32", &["multimem.st.release.sys.global.u32 "], &["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"]),
    c("multimem_st_release_sys_s32", &["multimem.st.release.sys.global.s32 "], &["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"]),
    c(
        "multimem_st_release_sys_u64",
        &["multimem.st.release.sys.global.u64 "],
        &["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"],
    ),
    c(
        "multimem_st_release_sys_s64",
        &["multimem.st.release.sys.global.s64 "],
        &["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"],
    ),
    c("multimem_st_release_sys_f32", &["multimem.st.release.sys.global.f32 "], &["MEMBAR.ALL.SYS", "STG.E.STRONG.SYS"]),
    c(
        "multimem_st_release_sys_v2_f32",
        &["multimem.st.release.sys.global.v2.f32 "],
        &["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"],
    ),
    c(
        "multimem_st_release_sys_v4_f32",
        &["multimem.st.release.sys.global.v4.f32 "],
        &["MEMBAR.ALL.SYS", "STG.E.128.STRONG.SYS"],
    ),
    c(
        "multimem_st_release_sys_f64",
        &["multimem.st.release.sys.global.f64 "],
        &["MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_add_u32", &["multimem.red.relaxed.sys.global.add.u32 "], &["REDG.E.ADD.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_add_s32",
        &["multimem.red.relaxed.sys.global.add.s32 "],
        &["REDG.E.ADD.S32.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_add_u64", &["multimem.red.relaxed.sys.global.add.u64 "], &["REDG.E.ADD.64.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_add_f32",
        &["multimem.red.relaxed.sys.global.add.f32 "],
        &["REDG.E.ADD.F32.FTZ.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v2_f32",
        &["multimem.red.relaxed.sys.global.add.v2.f32 "],
        &["REDG.E.ADD.F32x2.FTZ.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v4_f32",
        &["multimem.red.relaxed.sys.global.add.v4.f32 "],
        &["REDG.E.ADD.F32x4.FTZ.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_f64",
        &["multimem.red.relaxed.sys.global.add.f64 "],
        &["REDG.E.ADD.F64.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_f16x2",
        &["multimem.red.relaxed.sys.global.add.f16x2 "],
        &["REDG.E.ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v2_f16x2",
        &["multimem.red.relaxed.sys.global.add.v2.f16x2 "],
        &["REDG.E.ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v4_f16x2",
        &["multimem.red.relaxed.sys.global.add.v4.f16x2 "],
        &["REDG.E.ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v2_f16",
        &["multimem.red.relaxed.sys.global.add.v2.f16 "],
        &["REDG.E.ADD.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v4_f16",
        &["multimem.red.relaxed.sys.global.add.v4.f16 "],
        &["REDG.E.ADD.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v8_f16",
        &["multimem.red.relaxed.sys.global.add.v8.f16 "],
        &["REDG.E.ADD.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_bf16x2",
        &["multimem.red.relaxed.sys.global.add.bf16x2 "],
        &["REDG.E.ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v2_bf16x2",
        &["multimem.red.relaxed.sys.global.add.v2.bf16x2 "],
        &["REDG.E.ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v4_bf16x2",
        &["multimem.red.relaxed.sys.global.add.v4.bf16x2 "],
        &["REDG.E.ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v2_bf16",
        &["multimem.red.relaxed.sys.global.add.v2.bf16 "],
        &["REDG.E.ADD.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v4_bf16",
        &["multimem.red.relaxed.sys.global.add.v4.bf16 "],
        &["REDG.E.ADD.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_add_v8_bf16",
        &["multimem.red.relaxed.sys.global.add.v8.bf16 "],
        &["REDG.E.ADD.BF16x8.RN.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_min_u32", &["multimem.red.relaxed.sys.global.min.u32 "], &["REDG.E.MIN.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_min_s32",
        &["multimem.red.relaxed.sys.global.min.s32 "],
        &["REDG.E.MIN.S32.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_min_u64", &["multimem.red.relaxed.sys.global.min.u64 "], &["REDG.E.MIN.64.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_min_s64",
        &["multimem.red.relaxed.sys.global.min.s64 "],
        &["REDG.E.MIN.S64.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v2_f16x2",
        &["multimem.red.relaxed.sys.global.min.v2.f16x2 "],
        &["REDG.E.MIN.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v4_f16x2",
        &["multimem.red.relaxed.sys.global.min.v4.f16x2 "],
        &["REDG.E.MIN.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v2_f16",
        &["multimem.red.relaxed.sys.global.min.v2.f16 "],
        &["REDG.E.MIN.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v4_f16",
        &["multimem.red.relaxed.sys.global.min.v4.f16 "],
        &["REDG.E.MIN.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v8_f16",
        &["multimem.red.relaxed.sys.global.min.v8.f16 "],
        &["REDG.E.MIN.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v2_bf16x2",
        &["multimem.red.relaxed.sys.global.min.v2.bf16x2 "],
        &["REDG.E.MIN.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v4_bf16x2",
        &["multimem.red.relaxed.sys.global.min.v4.bf16x2 "],
        &["REDG.E.MIN.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v2_bf16",
        &["multimem.red.relaxed.sys.global.min.v2.bf16 "],
        &["REDG.E.MIN.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v4_bf16",
        &["multimem.red.relaxed.sys.global.min.v4.bf16 "],
        &["REDG.E.MIN.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_min_v8_bf16",
        &["multimem.red.relaxed.sys.global.min.v8.bf16 "],
        &["REDG.E.MIN.BF16x8.RN.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_max_u32", &["multimem.red.relaxed.sys.global.max.u32 "], &["REDG.E.MAX.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_max_s32",
        &["multimem.red.relaxed.sys.global.max.s32 "],
        &["REDG.E.MAX.S32.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_max_u64", &["multimem.red.relaxed.sys.global.max.u64 "], &["REDG.E.MAX.64.STRONG.SYS"]),
    c(
        "multimem_red_relaxed_sys_max_s64",
        &["multimem.red.relaxed.sys.global.max.s64 "],
        &["REDG.E.MAX.S64.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v2_f16x2",
        &["multimem.red.relaxed.sys.global.max.v2.f16x2 "],
        &["REDG.E.MAX.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v4_f16x2",
        &["multimem.red.relaxed.sys.global.max.v4.f16x2 "],
        &["REDG.E.MAX.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v2_f16",
        &["multimem.red.relaxed.sys.global.max.v2.f16 "],
        &["REDG.E.MAX.F16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v4_f16",
        &["multimem.red.relaxed.sys.global.max.v4.f16 "],
        &["REDG.E.MAX.F16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v8_f16",
        &["multimem.red.relaxed.sys.global.max.v8.f16 "],
        &["REDG.E.MAX.F16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v2_bf16x2",
        &["multimem.red.relaxed.sys.global.max.v2.bf16x2 "],
        &["REDG.E.MAX.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v4_bf16x2",
        &["multimem.red.relaxed.sys.global.max.v4.bf16x2 "],
        &["REDG.E.MAX.BF16x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v2_bf16",
        &["multimem.red.relaxed.sys.global.max.v2.bf16 "],
        &["REDG.E.MAX.BF16x2.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v4_bf16",
        &["multimem.red.relaxed.sys.global.max.v4.bf16 "],
        &["REDG.E.MAX.BF16x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_relaxed_sys_max_v8_bf16",
        &["multimem.red.relaxed.sys.global.max.v8.bf16 "],
        &["REDG.E.MAX.BF16x8.RN.STRONG.SYS"],
    ),
    c("multimem_red_relaxed_sys_and_b32", &["multimem.red.relaxed.sys.global.and.b32 "], &["REDG.E.AND.STRONG.SYS"]),
    c("multimem_red_relaxed_sys_and_b64", &["multimem.red.relaxed.sys.global.and.b64 "], &["REDG.E.AND.64.STRONG.SYS"]),
    c("multimem_red_relaxed_sys_or_b32", &["multimem.red.relaxed.sys.global.or.b32 "], &["REDG.E.OR.STRONG.SYS"]),
    c("multimem_red_relaxed_sys_or_b64", &["multimem.red.relaxed.sys.global.or.b64 "], &["REDG.E.OR.64.STRONG.SYS"]),
    c("multimem_red_relaxed_sys_xor_b32", &["multimem.red.relaxed.sys.global.xor.b32 "], &["REDG.E.XOR.STRONG.SYS"]),
    c("multimem_red_relaxed_sys_xor_b64", &["multimem.red.relaxed.sys.global.xor.b64 "], &["REDG.E.XOR.64.STRONG.SYS"]),
    c(
        "multimem_red_release_sys_add_u32",
        &["multimem.red.release.sys.global.add.u32 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.STRONG.SYS"],
    ),
    c(
        "multimem_red_release_sys_add_s32",
        &["multimem.red.release.sys.global.add.s32 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.S32.STRONG.SYS"],
    ),
    c(
        "multimem_red_release_sys_add_u64",
        &["multimem.red.release.sys.global.add.u64 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.64.STRONG.SYS"],
    ),
    c(
        "multimem_red_release_sys_add_f32",
        &["multimem.red.release.sys.global.add.f32 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.F32.FTZ.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_release_sys_add_v2_f32",
        &["multimem.red.release.sys.global.add.v2.f32 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.F32x2.FTZ.RN.STRONG.SYS"],
    ),
    c(
        "multimem_red_release_sys_add_v4_f32",
        &["multimem.red.release.sys.global.add.v4.f32 "],
        &["MEMBAR.ALL.SYS", "REDG.E.ADD.F32x4.FTZ.RN.STRONG.SYS"],
    ),
];

/// The fp8 multimem wrappers (feature `sm100a`), checked against the sm_100a module assembled with
/// `ptxas -arch=sm_100a`.
pub const SM100A_CHECKS: &[Check] = &[
    c(
        "multimem_ld_reduce_relaxed_sys_add_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.e4m3x4 "],
        &["LDGMC.E.ADD.E4M3x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.e4m3x4 "],
        &["LDGMC.E.HPADD.E4M3x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.e4m3x4 "],
        &["LDGMC.E.ADD.E4M3x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v2.e4m3x4 "],
        &["LDGMC.E.HPADD.E4M3x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.e4m3x4 "],
        &["LDGMC.E.ADD.E4M3x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v4.e4m3x4 "],
        &["LDGMC.E.HPADD.E4M3x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.e5m2x4 "],
        &["LDGMC.E.ADD.E5M2x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.e5m2x4 "],
        &["LDGMC.E.HPADD.E5M2x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.v2.e5m2x4 "],
        &["LDGMC.E.ADD.E5M2x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v2.e5m2x4 "],
        &["LDGMC.E.HPADD.E5M2x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.v4.e5m2x4 "],
        &["LDGMC.E.ADD.E5M2x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.add.acc::f16.v4.e5m2x4 "],
        &["LDGMC.E.HPADD.E5M2x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.e4m3x4 "],
        &["LDGMC.E.MIN.E4M3x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.e4m3x4 "],
        &["LDGMC.E.MIN.E4M3x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.e4m3x4 "],
        &["LDGMC.E.MIN.E4M3x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.e5m2x4 "],
        &["LDGMC.E.MIN.E5M2x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.v2.e5m2x4 "],
        &["LDGMC.E.MIN.E5M2x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.min.v4.e5m2x4 "],
        &["LDGMC.E.MIN.E5M2x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.e4m3x4 "],
        &["LDGMC.E.MAX.E4M3x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.e4m3x4 "],
        &["LDGMC.E.MAX.E4M3x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.e4m3x4 "],
        &["LDGMC.E.MAX.E4M3x16.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.e5m2x4 "],
        &["LDGMC.E.MAX.E5M2x4.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.v2.e5m2x4 "],
        &["LDGMC.E.MAX.E5M2x8.RN.STRONG.SYS"],
    ),
    c(
        "multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4",
        &["multimem.ld_reduce.relaxed.sys.global.max.v4.e5m2x4 "],
        &["LDGMC.E.MAX.E5M2x16.RN.STRONG.SYS"],
    ),
    c("multimem_st_relaxed_sys_e4m3x4", &["multimem.st.relaxed.sys.global.e4m3x4 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_e4m3x4", &["multimem.st.relaxed.sys.global.v2.e4m3x4 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_e4m3x4", &["multimem.st.relaxed.sys.global.v4.e4m3x4 "], &["STG.E.128.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_e5m2x4", &["multimem.st.relaxed.sys.global.e5m2x4 "], &["STG.E.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v2_e5m2x4", &["multimem.st.relaxed.sys.global.v2.e5m2x4 "], &["STG.E.64.STRONG.SYS"]),
    c("multimem_st_relaxed_sys_v4_e5m2x4", &["multimem.st.relaxed.sys.global.v4.e5m2x4 "], &["STG.E.128.STRONG.SYS"]),
];
