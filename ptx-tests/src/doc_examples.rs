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
    use mscclpp_device::sync::block_barrier;
    use mscclpp_device::window::Window;

    /// Sums every rank's `n` f32 at offset 0 of the window into `out` (one block per rank).
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn window_sum(w: Window, out: *mut f32, n: u64) {
        let t = Threads::block();
        // SAFETY: the host passes a live window of at least `n` f32 and an `out` of `n` f32.
        unsafe {
            // ... this rank's data written to w.local::<f32>(0) and on, then every rank meets:
            block_barrier();
            if t.index == 0 {
                w.barrier(SpinBudget::DEFAULT); // every rank's earlier writes are visible after it
            }
            block_barrier();
            for i in t.stride(n) {
                let mut sum = w.peer::<f32>(0, i * 4).as_ptr().read();
                for r in 1..w.size {
                    sum += w.peer::<f32>(r, i * 4).as_ptr().read(); // rank r's memory, mapped here
                }
                *out.add(i as usize) = sum;
            }
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
