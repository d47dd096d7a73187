//! One small kernel per instruction wrapper: `check_<wrapper>`. The CPU-side checks find each
//! kernel's body in the PTX and its function in the SASS.

use mscclpp_device::ptx::{
    arith, atom_red, cp_async_bulk as cp, fence, ld_st, mbarrier as mb, misc, print, smem, sreg,
};

/// Defines `#[no_mangle] extern "ptx-kernel"` functions whose bodies are unsafe blocks.
#[macro_export]
macro_rules! kernels {
    ($( $(#[$m:meta])* fn $name:ident($($arg:ident: $t:ty),* $(,)?) { $($body:tt)* } )*) => { $(
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name($($arg: $t),*) {
            #[allow(unused_unsafe)]
            unsafe { $($body)* }
        }
    )* };
}

// Loads and stores: the kernel reads p[0] and writes p[1] (or the reverse), so nothing folds.
kernels! {
    fn check_ld_relaxed_cta_u32(p: *mut u32) { *p.add(1) = ld_st::ld_relaxed_cta_u32(p); }
    fn check_ld_relaxed_gpu_u32(p: *mut u32) { *p.add(1) = ld_st::ld_relaxed_gpu_u32(p); }
    fn check_ld_relaxed_sys_u32(p: *mut u32) { *p.add(1) = ld_st::ld_relaxed_sys_u32(p); }
    fn check_ld_acquire_cta_u32(p: *mut u32) { *p.add(1) = ld_st::ld_acquire_cta_u32(p); }
    fn check_ld_acquire_gpu_u32(p: *mut u32) { *p.add(1) = ld_st::ld_acquire_gpu_u32(p); }
    fn check_ld_acquire_sys_u32(p: *mut u32) { *p.add(1) = ld_st::ld_acquire_sys_u32(p); }
    fn check_ld_relaxed_cta_u64(p: *mut u64) { *p.add(1) = ld_st::ld_relaxed_cta_u64(p); }
    fn check_ld_relaxed_gpu_u64(p: *mut u64) { *p.add(1) = ld_st::ld_relaxed_gpu_u64(p); }
    fn check_ld_relaxed_sys_u64(p: *mut u64) { *p.add(1) = ld_st::ld_relaxed_sys_u64(p); }
    fn check_ld_acquire_cta_u64(p: *mut u64) { *p.add(1) = ld_st::ld_acquire_cta_u64(p); }
    fn check_ld_acquire_gpu_u64(p: *mut u64) { *p.add(1) = ld_st::ld_acquire_gpu_u64(p); }
    fn check_ld_acquire_sys_u64(p: *mut u64) { *p.add(1) = ld_st::ld_acquire_sys_u64(p); }
    fn check_ld_volatile_u32(p: *mut u32) { *p.add(1) = ld_st::ld_volatile_u32(p); }
    fn check_ld_volatile_u64(p: *mut u64) { *p.add(1) = ld_st::ld_volatile_u64(p); }
    fn check_st_relaxed_cta_u32(p: *mut u32) { ld_st::st_relaxed_cta_u32(p, *p.add(1)); }
    fn check_st_relaxed_gpu_u32(p: *mut u32) { ld_st::st_relaxed_gpu_u32(p, *p.add(1)); }
    fn check_st_relaxed_sys_u32(p: *mut u32) { ld_st::st_relaxed_sys_u32(p, *p.add(1)); }
    fn check_st_release_cta_u32(p: *mut u32) { ld_st::st_release_cta_u32(p, *p.add(1)); }
    fn check_st_release_gpu_u32(p: *mut u32) { ld_st::st_release_gpu_u32(p, *p.add(1)); }
    fn check_st_release_sys_u32(p: *mut u32) { ld_st::st_release_sys_u32(p, *p.add(1)); }
    fn check_st_relaxed_cta_u64(p: *mut u64) { ld_st::st_relaxed_cta_u64(p, *p.add(1)); }
    fn check_st_relaxed_gpu_u64(p: *mut u64) { ld_st::st_relaxed_gpu_u64(p, *p.add(1)); }
    fn check_st_relaxed_sys_u64(p: *mut u64) { ld_st::st_relaxed_sys_u64(p, *p.add(1)); }
    fn check_st_release_cta_u64(p: *mut u64) { ld_st::st_release_cta_u64(p, *p.add(1)); }
    fn check_st_release_gpu_u64(p: *mut u64) { ld_st::st_release_gpu_u64(p, *p.add(1)); }
    fn check_st_release_sys_u64(p: *mut u64) { ld_st::st_release_sys_u64(p, *p.add(1)); }
    fn check_st_volatile_u32(p: *mut u32) { ld_st::st_volatile_u32(p, *p.add(1)); }
    fn check_st_volatile_u64(p: *mut u64) { ld_st::st_volatile_u64(p, *p.add(1)); }
}

// Special registers: each value is stored so it is not optimised away.
kernels! {
    fn check_tid_x(p: *mut u32) { *p = sreg::tid_x(); }
    fn check_ntid_x(p: *mut u32) { *p = sreg::ntid_x(); }
    fn check_ctaid_x(p: *mut u32) { *p = sreg::ctaid_x(); }
    fn check_nctaid_x(p: *mut u32) { *p = sreg::nctaid_x(); }
    fn check_laneid(p: *mut u32) { *p = sreg::laneid(); }
    fn check_smid(p: *mut u32) { *p = sreg::smid(); }
    fn check_globaltimer(p: *mut u64) { *p = sreg::globaltimer(); }
    fn check_clock64(p: *mut u64) { *p = sreg::clock64(); }
    fn check_dynamic_smem_size(p: *mut u32) { *p = sreg::dynamic_smem_size(); }
}

// Control, fences, shared-memory addressing, device messages.
kernels! {
    fn check_trap(p: *mut u32) { if *p == 7 { misc::trap() } }
    fn check_exit(p: *mut u32) { if *p == 7 { misc::exit() } *p = 1; }
    fn check_nanosleep(p: *mut u32) { misc::nanosleep(*p); }
    fn check_griddepcontrol_wait(p: *mut u32) { misc::griddepcontrol_wait(); *p = 1; }
    fn check_griddepcontrol_launch_dependents(p: *mut u32) { *p = 1; misc::griddepcontrol_launch_dependents(); }
    fn check_bar_sync(p: *mut u32) { *p = 1; misc::bar_sync(); }
    fn check_barrier_sync(p: *mut u32) { *p = 1; misc::barrier_sync(); }
    fn check_fence_proxy_async_shared_cta(p: *mut u32) { *p = 1; fence::fence_proxy_async_shared_cta(); }
    fn check_fence_mbarrier_init_release_cluster(p: *mut u32) { *p = 1; fence::fence_mbarrier_init_release_cluster(); }
    fn check_dynamic_smem_base(p: *mut u32) { *p = smem::dynamic_smem_base(); }
    fn check_cvta_shared_u64(p: *mut u64) { *p = smem::cvta_shared_u64(*(p as *const u32)) as u64; }
    fn check_cvta_to_shared_u64(p: *mut u64) { *(p as *mut u32) = smem::cvta_to_shared_u64(*p as *const u8); }
    fn check_print_failure(p: *mut u32) { if *p == 1 { print::print_failure(c"check", c"file.rs", 7); } }
    fn check_print_timeout(p: *mut u32) { if *p == 1 { print::print_timeout(c"check", 5); } }
    fn check_print_panic(p: *mut u32) { if *p == 1 { print::print_panic(c"file.rs", 7, c"m"); } }
    fn check_print_abort(p: *mut u32) { if *p == 1 { print::print_abort(c"check", 2); } }
}

// mbarrier: p[0] is the barrier's shared address, p[1] a count or byte total.
kernels! {
    fn check_mbarrier_init(p: *mut u32) { mb::mbarrier_init(*p, *p.add(1)); }
    fn check_mbarrier_inval(p: *mut u32) { mb::mbarrier_inval(*p); }
    fn check_mbarrier_expect_tx(p: *mut u32) { mb::mbarrier_expect_tx(*p, *p.add(1)); }
    fn check_mbarrier_arrive(p: *mut u32) { mb::mbarrier_arrive(*p); }
    fn check_mbarrier_arrive_expect_tx(p: *mut u32) { mb::mbarrier_arrive_expect_tx(*p, *p.add(1)); }
    fn check_mbarrier_test_wait_parity(p: *mut u32) { *p.add(2) = mb::mbarrier_test_wait_parity(*p, *p.add(1)) as u32; }
    fn check_mbarrier_try_wait_parity(p: *mut u32) { *p.add(2) = mb::mbarrier_try_wait_parity(*p, *p.add(1)) as u32; }
}

// Bulk copies: p[0] global address, p[1] low word = shared address, high word = size.
kernels! {
    fn check_cp_async_bulk_shared_global(p: *mut u64) {
        let w = *p.add(1);
        cp::cp_async_bulk_shared_global(w as u32, *p as *const u8, (w >> 32) as u32, *p.add(2) as u32);
    }
    fn check_cp_async_bulk_global_shared(p: *mut u64) {
        let w = *p.add(1);
        cp::cp_async_bulk_global_shared(*p as *mut u8, w as u32, (w >> 32) as u32);
    }
    fn check_cp_async_bulk_shared_global_hint(p: *mut u64) {
        let w = *p.add(1);
        cp::cp_async_bulk_shared_global_hint(w as u32, *p as *const u8, (w >> 32) as u32, *p.add(2) as u32, *p.add(3));
    }
    fn check_cp_async_bulk_global_shared_hint(p: *mut u64) {
        let w = *p.add(1);
        cp::cp_async_bulk_global_shared_hint(*p as *mut u8, w as u32, (w >> 32) as u32, *p.add(3));
    }
    fn check_cp_async_bulk_prefetch_l2(p: *mut u64) { cp::cp_async_bulk_prefetch_l2(*p as *const u8, *p.add(1) as u32); }
    fn check_cp_async_bulk_commit_group(p: *mut u64) { *p = 1; cp::cp_async_bulk_commit_group(); }
    fn check_cp_async_bulk_wait_group(p: *mut u64) { *p = 1; cp::cp_async_bulk_wait_group::<3>(); }
    fn check_cp_async_bulk_wait_group_read(p: *mut u64) { *p = 1; cp::cp_async_bulk_wait_group_read::<2>(); }
    fn check_createpolicy_fractional_l2_evict_first(p: *mut u64) { *p = cp::createpolicy_fractional_l2_evict_first(); }
    fn check_createpolicy_fractional_l2_evict_last(p: *mut u64) { *p = cp::createpolicy_fractional_l2_evict_last(); }
}

macro_rules! check_reduce {
    ($($k:ident => $w:ident;)*) => {
        kernels! { $( fn $k(p: *mut u64) { let w = *p.add(1); cp::$w(*p as *mut u8, w as u32, (w >> 32) as u32); } )* }
    };
}
check_reduce! {
    check_cp_reduce_async_bulk_add_noftz_f16 => cp_reduce_async_bulk_add_noftz_f16;
    check_cp_reduce_async_bulk_add_noftz_bf16 => cp_reduce_async_bulk_add_noftz_bf16;
    check_cp_reduce_async_bulk_add_f32 => cp_reduce_async_bulk_add_f32;
    check_cp_reduce_async_bulk_add_f64 => cp_reduce_async_bulk_add_f64;
    check_cp_reduce_async_bulk_add_u32 => cp_reduce_async_bulk_add_u32;
    check_cp_reduce_async_bulk_add_s32 => cp_reduce_async_bulk_add_s32;
    check_cp_reduce_async_bulk_add_u64 => cp_reduce_async_bulk_add_u64;
    check_cp_reduce_async_bulk_min_f16 => cp_reduce_async_bulk_min_f16;
    check_cp_reduce_async_bulk_min_bf16 => cp_reduce_async_bulk_min_bf16;
    check_cp_reduce_async_bulk_min_u32 => cp_reduce_async_bulk_min_u32;
    check_cp_reduce_async_bulk_min_s32 => cp_reduce_async_bulk_min_s32;
    check_cp_reduce_async_bulk_min_u64 => cp_reduce_async_bulk_min_u64;
    check_cp_reduce_async_bulk_min_s64 => cp_reduce_async_bulk_min_s64;
    check_cp_reduce_async_bulk_max_f16 => cp_reduce_async_bulk_max_f16;
    check_cp_reduce_async_bulk_max_bf16 => cp_reduce_async_bulk_max_bf16;
    check_cp_reduce_async_bulk_max_u32 => cp_reduce_async_bulk_max_u32;
    check_cp_reduce_async_bulk_max_s32 => cp_reduce_async_bulk_max_s32;
    check_cp_reduce_async_bulk_max_u64 => cp_reduce_async_bulk_max_u64;
    check_cp_reduce_async_bulk_max_s64 => cp_reduce_async_bulk_max_s64;
    check_cp_reduce_async_bulk_inc_u32 => cp_reduce_async_bulk_inc_u32;
    check_cp_reduce_async_bulk_dec_u32 => cp_reduce_async_bulk_dec_u32;
    check_cp_reduce_async_bulk_and_b32 => cp_reduce_async_bulk_and_b32;
    check_cp_reduce_async_bulk_or_b32 => cp_reduce_async_bulk_or_b32;
    check_cp_reduce_async_bulk_xor_b32 => cp_reduce_async_bulk_xor_b32;
    check_cp_reduce_async_bulk_and_b64 => cp_reduce_async_bulk_and_b64;
    check_cp_reduce_async_bulk_or_b64 => cp_reduce_async_bulk_or_b64;
    check_cp_reduce_async_bulk_xor_b64 => cp_reduce_async_bulk_xor_b64;
}

// Atomics, reductions, fences and the FIFO's 16-byte accesses.
kernels! {
    fn check_atom_relaxed_cta_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_relaxed_cta_add_u32(p, *p.add(2)); }
    fn check_atom_relaxed_cta_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_relaxed_cta_add_u64(p, *p.add(2)); }
    fn check_atom_relaxed_gpu_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_relaxed_gpu_add_u32(p, *p.add(2)); }
    fn check_atom_relaxed_gpu_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_relaxed_gpu_add_u64(p, *p.add(2)); }
    fn check_atom_relaxed_sys_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_relaxed_sys_add_u32(p, *p.add(2)); }
    fn check_atom_relaxed_sys_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_relaxed_sys_add_u64(p, *p.add(2)); }
    fn check_atom_acquire_cta_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acquire_cta_add_u32(p, *p.add(2)); }
    fn check_atom_acquire_cta_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acquire_cta_add_u64(p, *p.add(2)); }
    fn check_atom_acquire_gpu_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acquire_gpu_add_u32(p, *p.add(2)); }
    fn check_atom_acquire_gpu_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acquire_gpu_add_u64(p, *p.add(2)); }
    fn check_atom_acquire_sys_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acquire_sys_add_u32(p, *p.add(2)); }
    fn check_atom_acquire_sys_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acquire_sys_add_u64(p, *p.add(2)); }
    fn check_atom_release_cta_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_release_cta_add_u32(p, *p.add(2)); }
    fn check_atom_release_cta_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_release_cta_add_u64(p, *p.add(2)); }
    fn check_atom_release_gpu_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_release_gpu_add_u32(p, *p.add(2)); }
    fn check_atom_release_gpu_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_release_gpu_add_u64(p, *p.add(2)); }
    fn check_atom_release_sys_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_release_sys_add_u32(p, *p.add(2)); }
    fn check_atom_release_sys_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_release_sys_add_u64(p, *p.add(2)); }
    fn check_atom_acq_rel_cta_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acq_rel_cta_add_u32(p, *p.add(2)); }
    fn check_atom_acq_rel_cta_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acq_rel_cta_add_u64(p, *p.add(2)); }
    fn check_atom_acq_rel_gpu_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acq_rel_gpu_add_u32(p, *p.add(2)); }
    fn check_atom_acq_rel_gpu_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acq_rel_gpu_add_u64(p, *p.add(2)); }
    fn check_atom_acq_rel_sys_add_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acq_rel_sys_add_u32(p, *p.add(2)); }
    fn check_atom_acq_rel_sys_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_acq_rel_sys_add_u64(p, *p.add(2)); }
    fn check_atom_release_gpu_max_u64(p: *mut u64) { *p.add(1) = atom_red::atom_release_gpu_max_u64(p, *p.add(2)); }
    fn check_atom_relaxed_gpu_global_add_u64(p: *mut u64) { *p.add(1) = atom_red::atom_relaxed_gpu_global_add_u64(p, *p.add(2)); }
    fn check_atom_release_gpu_global_max_u64(p: *mut u64) { *p.add(1) = atom_red::atom_release_gpu_global_max_u64(p, *p.add(2)); }
    fn check_red_release_sys_global_add_u64(p: *mut u64) { atom_red::red_release_sys_global_add_u64(p, *p.add(2)); }
    fn check_red_relaxed_sys_global_add_u64(p: *mut u64) { atom_red::red_relaxed_sys_global_add_u64(p, *p.add(2)); }
    fn check_atom_acq_rel_gpu_inc_u32(p: *mut u32) { *p.add(1) = atom_red::atom_acq_rel_gpu_inc_u32(p, *p.add(2)); }
    fn check_red_relaxed_cta_add_u32(p: *mut u32) { atom_red::red_relaxed_cta_add_u32(p, *p.add(2)); }
    fn check_red_relaxed_cta_add_u64(p: *mut u64) { atom_red::red_relaxed_cta_add_u64(p, *p.add(2)); }
    fn check_red_relaxed_gpu_add_u32(p: *mut u32) { atom_red::red_relaxed_gpu_add_u32(p, *p.add(2)); }
    fn check_red_relaxed_gpu_add_u64(p: *mut u64) { atom_red::red_relaxed_gpu_add_u64(p, *p.add(2)); }
    fn check_red_relaxed_sys_add_u32(p: *mut u32) { atom_red::red_relaxed_sys_add_u32(p, *p.add(2)); }
    fn check_red_relaxed_sys_add_u64(p: *mut u64) { atom_red::red_relaxed_sys_add_u64(p, *p.add(2)); }
    fn check_red_release_cta_add_u32(p: *mut u32) { atom_red::red_release_cta_add_u32(p, *p.add(2)); }
    fn check_red_release_cta_add_u64(p: *mut u64) { atom_red::red_release_cta_add_u64(p, *p.add(2)); }
    fn check_red_release_gpu_add_u32(p: *mut u32) { atom_red::red_release_gpu_add_u32(p, *p.add(2)); }
    fn check_red_release_gpu_add_u64(p: *mut u64) { atom_red::red_release_gpu_add_u64(p, *p.add(2)); }
    fn check_red_release_sys_add_u32(p: *mut u32) { atom_red::red_release_sys_add_u32(p, *p.add(2)); }
    fn check_red_release_sys_add_u64(p: *mut u64) { atom_red::red_release_sys_add_u64(p, *p.add(2)); }
    fn check_fence_acq_rel_cta(p: *mut u32) { *p = 1; fence::fence_acq_rel_cta(); }
    fn check_fence_acq_rel_gpu(p: *mut u32) { *p = 1; fence::fence_acq_rel_gpu(); }
    fn check_fence_acq_rel_sys(p: *mut u32) { *p = 1; fence::fence_acq_rel_sys(); }
    fn check_fence_sc_cta(p: *mut u32) { *p = 1; fence::fence_sc_cta(); }
    fn check_fence_sc_gpu(p: *mut u32) { *p = 1; fence::fence_sc_gpu(); }
    fn check_fence_sc_sys(p: *mut u32) { *p = 1; fence::fence_sc_sys(); }
    fn check_st_release_sys_global_u64(p: *mut u64) { ld_st::st_release_sys_global_u64(p, *p.add(2)); }
    fn check_st_relaxed_sys_global_u64(p: *mut u64) { ld_st::st_relaxed_sys_global_u64(p, *p.add(2)); }
    fn check_st_release_sys_global_v2_u64(p: *mut u64) { ld_st::st_release_sys_global_v2_u64(p, *p.add(2), *p.add(3)); }
    fn check_ld_acquire_sys_global_v2_u64(p: *mut u64) { let (a, b) = ld_st::ld_acquire_sys_global_v2_u64(p); *p.add(2) = a; *p.add(3) = b; }
}

// Plain and volatile accesses of the copies and LL packets: p[0..] read, p[4..] written.
kernels! {
    fn check_ld_global_u32(p: *mut u32) { *p.add(4) = ld_st::ld_global_u32(p); }
    fn check_st_global_u32(p: *mut u32) { ld_st::st_global_u32(p.add(4), *p); }
    fn check_ld_global_u64(p: *mut u64) { *p.add(4) = ld_st::ld_global_u64(p); }
    fn check_st_global_u64(p: *mut u64) { ld_st::st_global_u64(p.add(4), *p); }
    fn check_ld_global_v4_u32(p: *mut u32) { *p.add(4) = ld_st::ld_global_v4_u32(p).iter().fold(0, |a, b| a ^ b); }
    fn check_st_global_v4_u32(p: *mut u32) { ld_st::st_global_v4_u32(p.add(4), [*p, 1, 2, 3]); }
    fn check_ld_volatile_global_v2_u32(p: *mut u32) { let [a, b] = ld_st::ld_volatile_global_v2_u32(p); *p.add(4) = a ^ b; }
    fn check_st_volatile_global_v2_u32(p: *mut u32) { ld_st::st_volatile_global_v2_u32(p.add(4), [*p, 1]); }
    fn check_ld_volatile_global_v4_u32(p: *mut u32) {
        *p.add(4) = ld_st::ld_volatile_global_v4_u32(p).iter().fold(0, |a, b| a ^ b);
    }
    fn check_st_volatile_global_v4_u32(p: *mut u32) { ld_st::st_volatile_global_v4_u32(p.add(4), [*p, 1, 2, 3]); }
}

// Packed half-precision sums: p[0], p[1] in, p[2] out.
kernels! {
    fn check_add_rn_f16x2(p: *mut u32) { *p.add(2) = arith::add_rn_f16x2(*p, *p.add(1)); }
    fn check_add_rn_bf16x2(p: *mut u32) { *p.add(2) = arith::add_rn_bf16x2(*p, *p.add(1)); }
}

// CTA barriers in divergent code: the documented pattern `if leader { init } barrier(); if leader
// { use }`. The compiler may thread the second branch through the first by copying the barrier
// into both arms; a `.aligned` barrier copied there is undefined behaviour (the warp arrives at two
// different barrier instructions). The SASS check counts the BAR.SYNC instructions: exactly one per
// source barrier. `p[0]` decides the leader so nothing folds.
kernels! {
    fn divergent_bar_sync(p: *mut u32) {
        let leader = sreg::tid_x() == *p;
        if leader {
            *p.add(1) = 1;
        }
        misc::bar_sync();
        if leader {
            *p.add(2) = *p.add(3);
        }
    }
    fn divergent_device_syncer(s: mscclpp_device::ptr::GlobalPtr<mscclpp_device::sync::DeviceSyncer>, p: *mut u32) {
        if sreg::tid_x() == 0 {
            *p = 1;
        }
        s.sync(*p.add(1), mscclpp_device::poll::SpinBudget::DEFAULT);
        if sreg::tid_x() == 0 {
            *p.add(2) = *p.add(3);
        }
    }
}
