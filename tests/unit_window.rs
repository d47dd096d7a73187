//! GPU tests of windows over memory the caller allocated (`Communicator::register_window_raw`),
//! with two ranks as threads of this process (each its own handle of GPU `rank % count`): fresh
//! random data every run, poisoned reads, every CUDA result checked, results compared on the host.

use std::sync::Arc;

use mscclpp_host::bootstrap::{Bootstrap, LocalBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::cudarc::driver::result as cu;
use mscclpp_host::memory::EXPORT_GRANULARITY;
use mscclpp_host::{DeviceBuffer, Gpu, Result};
use mscclpp_rs::testing::{self, POISON, gpus_or_skip};

/// Runs `f(rank, communicator, gpu)` on two ranks as threads; returns each rank's result.
fn on_two_ranks<T: Send + 'static>(
    count: usize,
    f: impl Fn(usize, &Communicator, &Arc<Gpu>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let threads: Vec<_> = LocalBootstrap::group(2)
        .unwrap()
        .into_iter()
        .map(|boot| {
            let f = f.clone();
            std::thread::spawn(move || {
                let me = boot.rank();
                let gpu = Gpu::open(me % count).unwrap();
                let comm = Communicator::new(Arc::new(boot), gpu.clone());
                f(me, &comm, &gpu)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// `bytes` of `cuMemAlloc` memory on `gpu` (the caller frees it with `cu::free_sync`).
fn raw_alloc(gpu: &Arc<Gpu>, bytes: usize) -> u64 {
    gpu.bind().unwrap();
    // SAFETY: a plain allocation in the bound context.
    unsafe { cu::malloc_sync(bytes) }.unwrap()
}

fn raw_free(gpu: &Arc<Gpu>, ptr: u64) {
    gpu.bind().unwrap();
    // SAFETY: from raw_alloc, freed once, after every window over it was freed on every rank.
    unsafe { cu::free_sync(ptr) }.unwrap();
}

/// Reads `n` bytes at a device address (this context's, or a peer's mapped here).
fn read(gpu: &Arc<Gpu>, addr: u64, n: usize) -> Vec<u8> {
    gpu.bind().unwrap();
    let mut v = vec![POISON; n];
    // SAFETY: `addr` is valid for `n` bytes in this context (the callers' windows).
    unsafe { cu::memcpy_dtoh_sync(&mut v, addr) }.unwrap();
    v
}

#[test]
fn a_window_over_cumemalloc_memory_maps_every_ranks_copy() {
    let Some(gpus) = gpus_or_skip("a_window_over_cumemalloc_memory_maps_every_ranks_copy", 1) else { return };
    let count = gpus.len();
    // A window of part of a 2-granule allocation (from its start), the size random.
    let bytes = (1 << 20) + 16 * testing::random_range(0, 4096) as usize;
    let data: Arc<Vec<Vec<u8>>> = Arc::new((0..2).map(|_| testing::random_bytes(bytes)).collect());
    let results = on_two_ranks(count, move |me, comm, gpu| -> Result<()> {
        let ptr = raw_alloc(gpu, 2 * EXPORT_GRANULARITY);
        gpu.bind()?;
        // SAFETY: `ptr` holds 2 granules; `data[me]` is `bytes` long.
        unsafe { cu::memcpy_htod_sync(ptr, &data[me]) }.unwrap();
        // SAFETY: freed below, after the window was freed on both ranks.
        let w = unsafe { comm.register_window_raw(ptr, bytes) }?;
        let h = w.handle();
        assert_eq!((h.rank, h.size, h.bytes, h.local.addr()), (me as u32, 2, bytes as u64, ptr), "rank {me}: handle");
        assert!(w.buffer().is_none(), "rank {me}: a window over the caller's memory owns no buffer");
        let table = read(gpu, h.bases.addr(), 16);
        let bases: Vec<u64> = table.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(bases[me], ptr, "rank {me}: its own entry");
        for (p, want) in data.iter().enumerate() {
            let got = read(gpu, bases[p], bytes);
            assert!(got == *want, "rank {me}: rank {p}'s window differs from what rank {p} wrote");
        }
        w.free()?;
        raw_free(gpu, ptr);
        Ok(())
    });
    for (r, res) in results.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

#[test]
fn memory_ipc_cannot_map_exactly_is_refused_on_every_rank_by_name() {
    let Some(gpus) = gpus_or_skip("memory_ipc_cannot_map_exactly_is_refused_on_every_rank_by_name", 1) else {
        return;
    };
    let count = gpus.len();
    // Rank 1 brings, in turn: the middle of an allocation, a small allocation of its own (which
    // the driver may carve out of a shared one), stream-ordered pool memory, a host address, and
    // more bytes than its allocation holds. Rank 0 always brings good memory.
    // Rank 0 reads the agreed verdict; rank 1 its own, more precise error where it has one.
    const MAP: &str = "rank 1 has memory CUDA IPC cannot map exactly";
    for (case, says) in [
        ("middle", [MAP, MAP]),
        ("small", [MAP, MAP]),
        ("pool", [MAP, MAP]),
        // (Pageable host memory is unknown to the driver, or host memory where it tracks it.)
        ("host", ["rank 1 has no device memory", "4096 bytes at 0x"]),
        ("beyond", ["rank 1 has no device memory", "its allocation ends"]),
    ] {
        let results = on_two_ranks(count, move |me, comm, gpu| -> std::result::Result<(), String> {
            let good = raw_alloc(gpu, EXPORT_GRANULARITY);
            // Host memory at a 4096-byte boundary (so that only its kind is wrong).
            let host = vec![0u8; 8192];
            let host_at = (host.as_ptr() as u64).next_multiple_of(4096);
            let mut pool = None;
            let (ptr, bytes, alloc) = match (me, case) {
                (0, _) => (good, 4096, None),
                (_, "middle") => (good + 4096, 4096, None),
                (_, "small") => {
                    let p = raw_alloc(gpu, 64 << 10);
                    (p, 4096, Some(p))
                }
                (_, "pool") => {
                    let s = gpu.stream().alloc_zeros::<u8>(EXPORT_GRANULARITY).map_err(|e| e.to_string())?;
                    let (p, _) = mscclpp_host::cudarc::driver::DevicePtr::device_ptr(&s, gpu.stream());
                    pool = Some(s);
                    (p, 4096, None)
                }
                (_, "host") => (host_at, 4096, None),
                _ => (good, 2 * EXPORT_GRANULARITY, None),
            };
            // SAFETY: every pointer but the refused ones stays allocated past the call (the
            // registration fails on every rank, so no window exists).
            let got = unsafe { comm.register_window_raw(ptr, bytes) };
            let e = got.err().ok_or(format!("rank {me}: case {case} was accepted"))?.to_string();
            if !e.contains(says[me]) {
                return Err(format!("rank {me}: case {case}: {e}"));
            }
            comm.bootstrap().barrier().map_err(|e| e.to_string())?;
            drop(pool);
            if let Some(p) = alloc {
                raw_free(gpu, p);
            }
            raw_free(gpu, good);
            Ok(())
        });
        for res in results {
            res.unwrap();
        }
    }
}

/// A buffer from `DeviceBuffer::from_raw` never frees the caller's memory, and says whether CUDA
/// IPC can map it.
#[test]
fn from_raw_neither_frees_nor_overclaims() {
    let Some(gpus) = gpus_or_skip("from_raw_neither_frees_nor_overclaims", 1) else { return };
    let gpu = &gpus[0];
    let ptr = raw_alloc(gpu, EXPORT_GRANULARITY);
    // SAFETY: `ptr` outlives both buffers (freed at the end).
    let whole = unsafe { DeviceBuffer::from_raw(gpu, ptr, EXPORT_GRANULARITY) }.unwrap();
    assert!(whole.is_exportable());
    // SAFETY: as above.
    let inner = unsafe { DeviceBuffer::from_raw(gpu, ptr + 256, 256) }.unwrap();
    assert!(!inner.is_exportable(), "the middle of an allocation");
    let data = testing::random_bytes(4096);
    whole.write(0, &data).unwrap();
    drop(whole);
    drop(inner);
    // Still allocated: the copy back works and holds the data.
    assert!(read(gpu, ptr, 4096) == data);
    raw_free(gpu, ptr);
}
