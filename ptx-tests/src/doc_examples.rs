//! The device crate's documentation examples that only device code can compile (its ```ignore
//! blocks), as kernels: `tests/doc_examples.rs` holds each block of `device/src` to the text
//! here, and the kernels must be in the module.

pub mod crate_overview {
    //! `mscclpp_device`'s crate docs, "Writing a kernel".
    use mscclpp_device::channel::memory::MemoryChannel;
    use mscclpp_device::copy::Threads;
    use mscclpp_device::ptr::GlobalPtr;

    /// Copies `bytes` of my buffer to the peer of `chan`, then tells it the data is there.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn send(chan: GlobalPtr<MemoryChannel>, bytes: u64) {
        let t = Threads::grid();
        // SAFETY: the host passes a channel it built for this GPU, whose buffers hold `bytes`.
        unsafe {
            let chan = chan.as_ptr().read();
            chan.put(0, 0, bytes, t); // every thread of the grid copies its share over NVLink
            // ... a grid barrier (sync::DeviceSyncer) so that every share is written, then:
            if t.index == 0 {
                chan.signal(); // release: the peer's wait() returns after this
            }
        }
    }
}

pub mod window_overview {
    //! `mscclpp_device`'s crate docs, "Symmetric windows".
    use mscclpp_device::copy::Threads;
    use mscclpp_device::poll::SpinBudget;
    use mscclpp_device::ptr::GlobalPtr;
    use mscclpp_device::window::{Scope, Window};

    /// Sums every rank's `n` f32 of `input` into `out` in rank order (one block per rank, a
    /// window of `size * n` f32 with slot 0; launch `round` = 1, 2, ...).
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn window_sum(w: Window, input: GlobalPtr<u8>, out: *mut f32, n: u64, round: u64) {
        let (block, bytes) = (Scope::Block, 4 * n);
        // SAFETY: the host passes a live window of `size * n` f32, `input` and `out` of `n` f32.
        unsafe {
            for p in 0..w.size {
                // My data into region `rank` of every rank's window, then a signal on slot 0.
                w.put_signal(p, w.rank as u64 * bytes, input, bytes, 0, block);
            }
            for q in 0..w.size {
                w.wait_signal_in(block, 0, q, round, SpinBudget::DEFAULT); // rank q's region is here
            }
            for i in Threads::block().stride(n) {
                let mut sum = w.local::<f32>(4 * i).as_ptr().read();
                for r in 1..w.size {
                    sum += w.local::<f32>(r as u64 * bytes + 4 * i).as_ptr().read();
                }
                *out.add(i as usize) = sum;
            }
            w.barrier_in(block, SpinBudget::DEFAULT); // every region read before the next launch
        }
    }
}

/// `mscclpp_device::atomic`'s module docs.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn atomic_doc_example(flag: *mut u64, counter: *mut u32, remote: *mut u64) {
    use mscclpp_device::atomic::{self, Acquire, Gpu, Relaxed, Release, Sys};
    // SAFETY: `flag`, `counter` and `remote` point to aligned words that every other thread
    // accesses atomically.
    unsafe {
        // Acquire; partner: the release store of `flag` by the thread before.
        let v: u64 = atomic::load::<Acquire, Sys, u64>(flag);
        // Release; partner: the next thread's acquire load of `flag`.
        atomic::store::<Release, Sys, u64>(flag, v + 1);
        let _ticket: u32 = atomic::fetch_add::<Relaxed, Gpu, u32>(counter, 1);
        // Release; partner: the owner's acquire read of `remote`.
        atomic::red_add::<Release, Sys, u64>(remote, 1);
    }
    // Partner: a fence or release of the threads whose relaxed accesses this one reads.
    atomic::fence_acq_rel::<Gpu>();
}
