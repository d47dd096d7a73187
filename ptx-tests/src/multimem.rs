//! Check kernels for the multimem wrappers: `check_<wrapper>` loads through (or stores to) the
//! multicast address in its first parameter, with the value in the second. They are assembled
//! and disassembled on the CPU only; nothing here can run without a multicast mapping.

use mscclpp_device::ptr::MultimemPtr;
use mscclpp_device::ptx::multimem as mm;
#[allow(unused_imports)]
use mscclpp_device::vec::*;

use crate::kernels;

/// `check_<w>(p, out)`: `*out = w(p)`.
macro_rules! check_loads {
    ($($k:ident => $w:ident: $t:ty;)*) => {
        kernels! { $( fn $k(p: MultimemPtr<$t>, out: *mut $t) { *out = mm::$w(p); } )* }
    };
}

/// `check_<w>(p, v)`: `w(p, *v)`.
macro_rules! check_stores {
    ($($k:ident => $w:ident: $t:ty;)*) => {
        kernels! { $( fn $k(p: MultimemPtr<$t>, v: *const $t) { mm::$w(p, *v); } )* }
    };
}

check_loads! {
    check_multimem_ld_reduce_relaxed_sys_add_u32 => multimem_ld_reduce_relaxed_sys_add_u32: u32;
    check_multimem_ld_reduce_relaxed_sys_add_s32 => multimem_ld_reduce_relaxed_sys_add_s32: i32;
    check_multimem_ld_reduce_relaxed_sys_add_u64 => multimem_ld_reduce_relaxed_sys_add_u64: u64;
    check_multimem_ld_reduce_relaxed_sys_add_f32 => multimem_ld_reduce_relaxed_sys_add_f32: f32;
    check_multimem_ld_reduce_relaxed_sys_add_v2_f32 => multimem_ld_reduce_relaxed_sys_add_v2_f32: F32x2;
    check_multimem_ld_reduce_relaxed_sys_add_v4_f32 => multimem_ld_reduce_relaxed_sys_add_v4_f32: F32x4;
    check_multimem_ld_reduce_relaxed_sys_add_f64 => multimem_ld_reduce_relaxed_sys_add_f64: f64;
    check_multimem_ld_reduce_relaxed_sys_add_f16x2 => multimem_ld_reduce_relaxed_sys_add_f16x2: F16x2;
    check_multimem_ld_reduce_relaxed_sys_add_v2_f16x2 => multimem_ld_reduce_relaxed_sys_add_v2_f16x2: F16x4;
    check_multimem_ld_reduce_relaxed_sys_add_v4_f16x2 => multimem_ld_reduce_relaxed_sys_add_v4_f16x2: F16x8;
    check_multimem_ld_reduce_relaxed_sys_add_v2_f16 => multimem_ld_reduce_relaxed_sys_add_v2_f16: F16x2;
    check_multimem_ld_reduce_relaxed_sys_add_v4_f16 => multimem_ld_reduce_relaxed_sys_add_v4_f16: F16x4;
    check_multimem_ld_reduce_relaxed_sys_add_v8_f16 => multimem_ld_reduce_relaxed_sys_add_v8_f16: F16x8;
    check_multimem_ld_reduce_relaxed_sys_add_bf16x2 => multimem_ld_reduce_relaxed_sys_add_bf16x2: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_add_v2_bf16x2 => multimem_ld_reduce_relaxed_sys_add_v2_bf16x2: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_add_v4_bf16x2 => multimem_ld_reduce_relaxed_sys_add_v4_bf16x2: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_add_v2_bf16 => multimem_ld_reduce_relaxed_sys_add_v2_bf16: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_add_v4_bf16 => multimem_ld_reduce_relaxed_sys_add_v4_bf16: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_add_v8_bf16 => multimem_ld_reduce_relaxed_sys_add_v8_bf16: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_min_u32 => multimem_ld_reduce_relaxed_sys_min_u32: u32;
    check_multimem_ld_reduce_relaxed_sys_min_s32 => multimem_ld_reduce_relaxed_sys_min_s32: i32;
    check_multimem_ld_reduce_relaxed_sys_min_u64 => multimem_ld_reduce_relaxed_sys_min_u64: u64;
    check_multimem_ld_reduce_relaxed_sys_min_s64 => multimem_ld_reduce_relaxed_sys_min_s64: i64;
    check_multimem_ld_reduce_relaxed_sys_min_f16x2 => multimem_ld_reduce_relaxed_sys_min_f16x2: F16x2;
    check_multimem_ld_reduce_relaxed_sys_min_v2_f16x2 => multimem_ld_reduce_relaxed_sys_min_v2_f16x2: F16x4;
    check_multimem_ld_reduce_relaxed_sys_min_v4_f16x2 => multimem_ld_reduce_relaxed_sys_min_v4_f16x2: F16x8;
    check_multimem_ld_reduce_relaxed_sys_min_v2_f16 => multimem_ld_reduce_relaxed_sys_min_v2_f16: F16x2;
    check_multimem_ld_reduce_relaxed_sys_min_v4_f16 => multimem_ld_reduce_relaxed_sys_min_v4_f16: F16x4;
    check_multimem_ld_reduce_relaxed_sys_min_v8_f16 => multimem_ld_reduce_relaxed_sys_min_v8_f16: F16x8;
    check_multimem_ld_reduce_relaxed_sys_min_bf16x2 => multimem_ld_reduce_relaxed_sys_min_bf16x2: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_min_v2_bf16x2 => multimem_ld_reduce_relaxed_sys_min_v2_bf16x2: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_min_v4_bf16x2 => multimem_ld_reduce_relaxed_sys_min_v4_bf16x2: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_min_v2_bf16 => multimem_ld_reduce_relaxed_sys_min_v2_bf16: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_min_v4_bf16 => multimem_ld_reduce_relaxed_sys_min_v4_bf16: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_min_v8_bf16 => multimem_ld_reduce_relaxed_sys_min_v8_bf16: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_max_u32 => multimem_ld_reduce_relaxed_sys_max_u32: u32;
    check_multimem_ld_reduce_relaxed_sys_max_s32 => multimem_ld_reduce_relaxed_sys_max_s32: i32;
    check_multimem_ld_reduce_relaxed_sys_max_u64 => multimem_ld_reduce_relaxed_sys_max_u64: u64;
    check_multimem_ld_reduce_relaxed_sys_max_s64 => multimem_ld_reduce_relaxed_sys_max_s64: i64;
    check_multimem_ld_reduce_relaxed_sys_max_f16x2 => multimem_ld_reduce_relaxed_sys_max_f16x2: F16x2;
    check_multimem_ld_reduce_relaxed_sys_max_v2_f16x2 => multimem_ld_reduce_relaxed_sys_max_v2_f16x2: F16x4;
    check_multimem_ld_reduce_relaxed_sys_max_v4_f16x2 => multimem_ld_reduce_relaxed_sys_max_v4_f16x2: F16x8;
    check_multimem_ld_reduce_relaxed_sys_max_v2_f16 => multimem_ld_reduce_relaxed_sys_max_v2_f16: F16x2;
    check_multimem_ld_reduce_relaxed_sys_max_v4_f16 => multimem_ld_reduce_relaxed_sys_max_v4_f16: F16x4;
    check_multimem_ld_reduce_relaxed_sys_max_v8_f16 => multimem_ld_reduce_relaxed_sys_max_v8_f16: F16x8;
    check_multimem_ld_reduce_relaxed_sys_max_bf16x2 => multimem_ld_reduce_relaxed_sys_max_bf16x2: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_max_v2_bf16x2 => multimem_ld_reduce_relaxed_sys_max_v2_bf16x2: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_max_v4_bf16x2 => multimem_ld_reduce_relaxed_sys_max_v4_bf16x2: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_max_v2_bf16 => multimem_ld_reduce_relaxed_sys_max_v2_bf16: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_max_v4_bf16 => multimem_ld_reduce_relaxed_sys_max_v4_bf16: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_max_v8_bf16 => multimem_ld_reduce_relaxed_sys_max_v8_bf16: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_and_b32 => multimem_ld_reduce_relaxed_sys_and_b32: u32;
    check_multimem_ld_reduce_relaxed_sys_and_b64 => multimem_ld_reduce_relaxed_sys_and_b64: u64;
    check_multimem_ld_reduce_relaxed_sys_or_b32 => multimem_ld_reduce_relaxed_sys_or_b32: u32;
    check_multimem_ld_reduce_relaxed_sys_or_b64 => multimem_ld_reduce_relaxed_sys_or_b64: u64;
    check_multimem_ld_reduce_relaxed_sys_xor_b32 => multimem_ld_reduce_relaxed_sys_xor_b32: u32;
    check_multimem_ld_reduce_relaxed_sys_xor_b64 => multimem_ld_reduce_relaxed_sys_xor_b64: u64;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_f16x2: F16x2;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16x2: F16x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16x2: F16x8;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_f16: F16x2;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_f16: F16x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_f16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_f16: F16x8;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_bf16x2: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16x2: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16x2: Bf16x8;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v2_bf16: Bf16x2;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v4_bf16: Bf16x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_bf16 => multimem_ld_reduce_relaxed_sys_add_acc_f32_v8_bf16: Bf16x8;
    check_multimem_ld_reduce_acquire_sys_add_u32 => multimem_ld_reduce_acquire_sys_add_u32: u32;
    check_multimem_ld_reduce_acquire_sys_add_s32 => multimem_ld_reduce_acquire_sys_add_s32: i32;
    check_multimem_ld_reduce_acquire_sys_add_u64 => multimem_ld_reduce_acquire_sys_add_u64: u64;
    check_multimem_ld_reduce_acquire_sys_add_f32 => multimem_ld_reduce_acquire_sys_add_f32: f32;
    check_multimem_ld_reduce_acquire_sys_add_v2_f32 => multimem_ld_reduce_acquire_sys_add_v2_f32: F32x2;
    check_multimem_ld_reduce_acquire_sys_add_v4_f32 => multimem_ld_reduce_acquire_sys_add_v4_f32: F32x4;
}

check_stores! {
    check_multimem_st_relaxed_sys_u32 => multimem_st_relaxed_sys_u32: u32;
    check_multimem_st_relaxed_sys_s32 => multimem_st_relaxed_sys_s32: i32;
    check_multimem_st_relaxed_sys_u64 => multimem_st_relaxed_sys_u64: u64;
    check_multimem_st_relaxed_sys_s64 => multimem_st_relaxed_sys_s64: i64;
    check_multimem_st_relaxed_sys_b32 => multimem_st_relaxed_sys_b32: u32;
    check_multimem_st_relaxed_sys_b64 => multimem_st_relaxed_sys_b64: u64;
    check_multimem_st_relaxed_sys_f32 => multimem_st_relaxed_sys_f32: f32;
    check_multimem_st_relaxed_sys_v2_f32 => multimem_st_relaxed_sys_v2_f32: F32x2;
    check_multimem_st_relaxed_sys_v4_f32 => multimem_st_relaxed_sys_v4_f32: F32x4;
    check_multimem_st_relaxed_sys_f64 => multimem_st_relaxed_sys_f64: f64;
    check_multimem_st_relaxed_sys_f16x2 => multimem_st_relaxed_sys_f16x2: F16x2;
    check_multimem_st_relaxed_sys_v2_f16x2 => multimem_st_relaxed_sys_v2_f16x2: F16x4;
    check_multimem_st_relaxed_sys_v4_f16x2 => multimem_st_relaxed_sys_v4_f16x2: F16x8;
    check_multimem_st_relaxed_sys_v2_f16 => multimem_st_relaxed_sys_v2_f16: F16x2;
    check_multimem_st_relaxed_sys_v4_f16 => multimem_st_relaxed_sys_v4_f16: F16x4;
    check_multimem_st_relaxed_sys_v8_f16 => multimem_st_relaxed_sys_v8_f16: F16x8;
    check_multimem_st_relaxed_sys_bf16x2 => multimem_st_relaxed_sys_bf16x2: Bf16x2;
    check_multimem_st_relaxed_sys_v2_bf16x2 => multimem_st_relaxed_sys_v2_bf16x2: Bf16x4;
    check_multimem_st_relaxed_sys_v4_bf16x2 => multimem_st_relaxed_sys_v4_bf16x2: Bf16x8;
    check_multimem_st_relaxed_sys_v2_bf16 => multimem_st_relaxed_sys_v2_bf16: Bf16x2;
    check_multimem_st_relaxed_sys_v4_bf16 => multimem_st_relaxed_sys_v4_bf16: Bf16x4;
    check_multimem_st_relaxed_sys_v8_bf16 => multimem_st_relaxed_sys_v8_bf16: Bf16x8;
    check_multimem_st_release_sys_u32 => multimem_st_release_sys_u32: u32;
    check_multimem_st_release_sys_s32 => multimem_st_release_sys_s32: i32;
    check_multimem_st_release_sys_u64 => multimem_st_release_sys_u64: u64;
    check_multimem_st_release_sys_s64 => multimem_st_release_sys_s64: i64;
    check_multimem_st_release_sys_f32 => multimem_st_release_sys_f32: f32;
    check_multimem_st_release_sys_v2_f32 => multimem_st_release_sys_v2_f32: F32x2;
    check_multimem_st_release_sys_v4_f32 => multimem_st_release_sys_v4_f32: F32x4;
    check_multimem_st_release_sys_f64 => multimem_st_release_sys_f64: f64;
    check_multimem_red_relaxed_sys_add_u32 => multimem_red_relaxed_sys_add_u32: u32;
    check_multimem_red_relaxed_sys_add_s32 => multimem_red_relaxed_sys_add_s32: i32;
    check_multimem_red_relaxed_sys_add_u64 => multimem_red_relaxed_sys_add_u64: u64;
    check_multimem_red_relaxed_sys_add_f32 => multimem_red_relaxed_sys_add_f32: f32;
    check_multimem_red_relaxed_sys_add_v2_f32 => multimem_red_relaxed_sys_add_v2_f32: F32x2;
    check_multimem_red_relaxed_sys_add_v4_f32 => multimem_red_relaxed_sys_add_v4_f32: F32x4;
    check_multimem_red_relaxed_sys_add_f64 => multimem_red_relaxed_sys_add_f64: f64;
    check_multimem_red_relaxed_sys_add_f16x2 => multimem_red_relaxed_sys_add_f16x2: F16x2;
    check_multimem_red_relaxed_sys_add_v2_f16x2 => multimem_red_relaxed_sys_add_v2_f16x2: F16x4;
    check_multimem_red_relaxed_sys_add_v4_f16x2 => multimem_red_relaxed_sys_add_v4_f16x2: F16x8;
    check_multimem_red_relaxed_sys_add_v2_f16 => multimem_red_relaxed_sys_add_v2_f16: F16x2;
    check_multimem_red_relaxed_sys_add_v4_f16 => multimem_red_relaxed_sys_add_v4_f16: F16x4;
    check_multimem_red_relaxed_sys_add_v8_f16 => multimem_red_relaxed_sys_add_v8_f16: F16x8;
    check_multimem_red_relaxed_sys_add_bf16x2 => multimem_red_relaxed_sys_add_bf16x2: Bf16x2;
    check_multimem_red_relaxed_sys_add_v2_bf16x2 => multimem_red_relaxed_sys_add_v2_bf16x2: Bf16x4;
    check_multimem_red_relaxed_sys_add_v4_bf16x2 => multimem_red_relaxed_sys_add_v4_bf16x2: Bf16x8;
    check_multimem_red_relaxed_sys_add_v2_bf16 => multimem_red_relaxed_sys_add_v2_bf16: Bf16x2;
    check_multimem_red_relaxed_sys_add_v4_bf16 => multimem_red_relaxed_sys_add_v4_bf16: Bf16x4;
    check_multimem_red_relaxed_sys_add_v8_bf16 => multimem_red_relaxed_sys_add_v8_bf16: Bf16x8;
    check_multimem_red_relaxed_sys_min_u32 => multimem_red_relaxed_sys_min_u32: u32;
    check_multimem_red_relaxed_sys_min_s32 => multimem_red_relaxed_sys_min_s32: i32;
    check_multimem_red_relaxed_sys_min_u64 => multimem_red_relaxed_sys_min_u64: u64;
    check_multimem_red_relaxed_sys_min_s64 => multimem_red_relaxed_sys_min_s64: i64;
    check_multimem_red_relaxed_sys_min_v2_f16x2 => multimem_red_relaxed_sys_min_v2_f16x2: F16x4;
    check_multimem_red_relaxed_sys_min_v4_f16x2 => multimem_red_relaxed_sys_min_v4_f16x2: F16x8;
    check_multimem_red_relaxed_sys_min_v2_f16 => multimem_red_relaxed_sys_min_v2_f16: F16x2;
    check_multimem_red_relaxed_sys_min_v4_f16 => multimem_red_relaxed_sys_min_v4_f16: F16x4;
    check_multimem_red_relaxed_sys_min_v8_f16 => multimem_red_relaxed_sys_min_v8_f16: F16x8;
    check_multimem_red_relaxed_sys_min_v2_bf16x2 => multimem_red_relaxed_sys_min_v2_bf16x2: Bf16x4;
    check_multimem_red_relaxed_sys_min_v4_bf16x2 => multimem_red_relaxed_sys_min_v4_bf16x2: Bf16x8;
    check_multimem_red_relaxed_sys_min_v2_bf16 => multimem_red_relaxed_sys_min_v2_bf16: Bf16x2;
    check_multimem_red_relaxed_sys_min_v4_bf16 => multimem_red_relaxed_sys_min_v4_bf16: Bf16x4;
    check_multimem_red_relaxed_sys_min_v8_bf16 => multimem_red_relaxed_sys_min_v8_bf16: Bf16x8;
    check_multimem_red_relaxed_sys_max_u32 => multimem_red_relaxed_sys_max_u32: u32;
    check_multimem_red_relaxed_sys_max_s32 => multimem_red_relaxed_sys_max_s32: i32;
    check_multimem_red_relaxed_sys_max_u64 => multimem_red_relaxed_sys_max_u64: u64;
    check_multimem_red_relaxed_sys_max_s64 => multimem_red_relaxed_sys_max_s64: i64;
    check_multimem_red_relaxed_sys_max_v2_f16x2 => multimem_red_relaxed_sys_max_v2_f16x2: F16x4;
    check_multimem_red_relaxed_sys_max_v4_f16x2 => multimem_red_relaxed_sys_max_v4_f16x2: F16x8;
    check_multimem_red_relaxed_sys_max_v2_f16 => multimem_red_relaxed_sys_max_v2_f16: F16x2;
    check_multimem_red_relaxed_sys_max_v4_f16 => multimem_red_relaxed_sys_max_v4_f16: F16x4;
    check_multimem_red_relaxed_sys_max_v8_f16 => multimem_red_relaxed_sys_max_v8_f16: F16x8;
    check_multimem_red_relaxed_sys_max_v2_bf16x2 => multimem_red_relaxed_sys_max_v2_bf16x2: Bf16x4;
    check_multimem_red_relaxed_sys_max_v4_bf16x2 => multimem_red_relaxed_sys_max_v4_bf16x2: Bf16x8;
    check_multimem_red_relaxed_sys_max_v2_bf16 => multimem_red_relaxed_sys_max_v2_bf16: Bf16x2;
    check_multimem_red_relaxed_sys_max_v4_bf16 => multimem_red_relaxed_sys_max_v4_bf16: Bf16x4;
    check_multimem_red_relaxed_sys_max_v8_bf16 => multimem_red_relaxed_sys_max_v8_bf16: Bf16x8;
    check_multimem_red_relaxed_sys_and_b32 => multimem_red_relaxed_sys_and_b32: u32;
    check_multimem_red_relaxed_sys_and_b64 => multimem_red_relaxed_sys_and_b64: u64;
    check_multimem_red_relaxed_sys_or_b32 => multimem_red_relaxed_sys_or_b32: u32;
    check_multimem_red_relaxed_sys_or_b64 => multimem_red_relaxed_sys_or_b64: u64;
    check_multimem_red_relaxed_sys_xor_b32 => multimem_red_relaxed_sys_xor_b32: u32;
    check_multimem_red_relaxed_sys_xor_b64 => multimem_red_relaxed_sys_xor_b64: u64;
    check_multimem_red_release_sys_add_u32 => multimem_red_release_sys_add_u32: u32;
    check_multimem_red_release_sys_add_s32 => multimem_red_release_sys_add_s32: i32;
    check_multimem_red_release_sys_add_u64 => multimem_red_release_sys_add_u64: u64;
    check_multimem_red_release_sys_add_f32 => multimem_red_release_sys_add_f32: f32;
    check_multimem_red_release_sys_add_v2_f32 => multimem_red_release_sys_add_v2_f32: F32x2;
    check_multimem_red_release_sys_add_v4_f32 => multimem_red_release_sys_add_v4_f32: F32x4;
}

#[cfg(feature = "sm100a")]
check_loads! {
    check_multimem_ld_reduce_relaxed_sys_add_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_e4m3x4: E4m3x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_e4m3x4: E4m3x4;
    check_multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_v2_e4m3x4: E4m3x8;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e4m3x4: E4m3x8;
    check_multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_v4_e4m3x4: E4m3x16;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e4m3x4: E4m3x16;
    check_multimem_ld_reduce_relaxed_sys_add_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_e5m2x4: E5m2x4;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_e5m2x4: E5m2x4;
    check_multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_v2_e5m2x4: E5m2x8;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v2_e5m2x4: E5m2x8;
    check_multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_v4_e5m2x4: E5m2x16;
    check_multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4 => multimem_ld_reduce_relaxed_sys_add_acc_f16_v4_e5m2x4: E5m2x16;
    check_multimem_ld_reduce_relaxed_sys_min_e4m3x4 => multimem_ld_reduce_relaxed_sys_min_e4m3x4: E4m3x4;
    check_multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4 => multimem_ld_reduce_relaxed_sys_min_v2_e4m3x4: E4m3x8;
    check_multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4 => multimem_ld_reduce_relaxed_sys_min_v4_e4m3x4: E4m3x16;
    check_multimem_ld_reduce_relaxed_sys_min_e5m2x4 => multimem_ld_reduce_relaxed_sys_min_e5m2x4: E5m2x4;
    check_multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4 => multimem_ld_reduce_relaxed_sys_min_v2_e5m2x4: E5m2x8;
    check_multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4 => multimem_ld_reduce_relaxed_sys_min_v4_e5m2x4: E5m2x16;
    check_multimem_ld_reduce_relaxed_sys_max_e4m3x4 => multimem_ld_reduce_relaxed_sys_max_e4m3x4: E4m3x4;
    check_multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4 => multimem_ld_reduce_relaxed_sys_max_v2_e4m3x4: E4m3x8;
    check_multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4 => multimem_ld_reduce_relaxed_sys_max_v4_e4m3x4: E4m3x16;
    check_multimem_ld_reduce_relaxed_sys_max_e5m2x4 => multimem_ld_reduce_relaxed_sys_max_e5m2x4: E5m2x4;
    check_multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4 => multimem_ld_reduce_relaxed_sys_max_v2_e5m2x4: E5m2x8;
    check_multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4 => multimem_ld_reduce_relaxed_sys_max_v4_e5m2x4: E5m2x16;
}

#[cfg(feature = "sm100a")]
check_stores! {
    check_multimem_st_relaxed_sys_e4m3x4 => multimem_st_relaxed_sys_e4m3x4: E4m3x4;
    check_multimem_st_relaxed_sys_v2_e4m3x4 => multimem_st_relaxed_sys_v2_e4m3x4: E4m3x8;
    check_multimem_st_relaxed_sys_v4_e4m3x4 => multimem_st_relaxed_sys_v4_e4m3x4: E4m3x16;
    check_multimem_st_relaxed_sys_e5m2x4 => multimem_st_relaxed_sys_e5m2x4: E5m2x4;
    check_multimem_st_relaxed_sys_v2_e5m2x4 => multimem_st_relaxed_sys_v2_e5m2x4: E5m2x8;
    check_multimem_st_relaxed_sys_v4_e5m2x4 => multimem_st_relaxed_sys_v4_e5m2x4: E5m2x16;
}
