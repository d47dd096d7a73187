//! GPU tests of windows over memory the caller allocated (`Communicator::register_window_raw`,
//! `register_window_slice`), with two ranks as threads of this process (each its own handle of
//! GPU `rank % count`, or both on GPU 0): fresh random data every run, poisoned reads, every CUDA
//! result checked, results compared on the host. (Between processes, memory CUDA IPC cannot map
//! exactly is refused: the `window` phase of `tests/mp_patterns` checks that.)

use std::sync::Arc;

use mscclpp_host::bootstrap::{Bootstrap, LocalBootstrap};
use mscclpp_host::comm::Communicator;
use mscclpp_host::cudarc::driver::result as cu;
use mscclpp_host::cudarc::driver::{CudaSlice, DevicePtr};
use mscclpp_host::memory::EXPORT_GRANULARITY;
use mscclpp_host::window::Window;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig, Result};
use mscclpp_rs::PTX;
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

/// Two launches of `win_put` (a put into every rank's window, signals, the team barrier, reads
/// from every rank's window) on `w`, a window of `2 * chunk` bytes over two ranks: fresh random
/// data (`data[round][from]`: rank `from`'s chunk for rank 0, then for rank 1), this rank's
/// window and the output poisoned before each launch, both compared on the host after it.
fn put_through(me: usize, comm: &Communicator, gpu: &Arc<Gpu>, w: &Window, data: &[Vec<Vec<u8>>]) -> Result<()> {
    let chunk = w.len() / 2;
    let local = w.local().addr();
    // The kernel looked up (its module loaded) before any rank launches: a rank whose lookup
    // loads the module waits for the GPU's running kernels, one of which would be a peer's
    // `win_put` waiting for this rank.
    gpu.function(PTX, "win_put")?;
    for (round, sent) in data.iter().enumerate() {
        let src = DeviceBuffer::from_slice(gpu, &sent[me])?;
        let out = DeviceBuffer::filled(gpu, 2 * chunk, POISON)?;
        gpu.bind()?;
        // SAFETY: this rank's window memory, `2 * chunk` bytes, no kernel on it (the barrier of
        // the previous round's end).
        unsafe { cu::memset_d8_sync(local, POISON, 2 * chunk) }.unwrap();
        comm.bootstrap().barrier()?;
        let args = Args::new().arg(w.handle()).arg(src.ptr::<u8>()).arg(out.ptr::<u8>()).arg(chunk as u64);
        // SAFETY: win_put's parameters in order; every buffer outlives the synchronize below.
        unsafe { gpu.launch(PTX, "win_put", LaunchConfig::new(1, 256), args.arg(round as u64 + 1)) }?;
        gpu.synchronize()?;
        let chunk_of = |from: usize, to: usize| &sent[from][to * chunk..(to + 1) * chunk];
        // This rank's window: at `q * chunk` what rank q sent it.
        let want: Vec<u8> = (0..2).flat_map(|q| chunk_of(q, me).to_vec()).collect();
        assert!(read(gpu, local, 2 * chunk) == want, "rank {me}, launch {round}: this rank's window");
        // Chunk p of the output: what the other rank sent rank p (read from rank p's window).
        let want: Vec<u8> = (0..2).flat_map(|p| chunk_of(1 - me, p).to_vec()).collect();
        assert!(out.to_vec::<u8>()? == want, "rank {me}, launch {round}: the reads from the windows");
        comm.bootstrap().barrier()?;
    }
    Ok(())
}

/// Fresh random data for two launches of [`put_through`] with `chunk` bytes per pair.
fn put_data(chunk: usize) -> Arc<Vec<Vec<Vec<u8>>>> {
    Arc::new((0..2).map(|_| (0..2).map(|_| testing::random_bytes(2 * chunk)).collect()).collect())
}

/// What a rank brings in the cases below.
enum Brought {
    /// A pointer to register with `register_window_raw`, and the allocation to free after.
    Raw(u64, Option<u64>),
    /// A slice of the stream-ordered pool, registered with `register_window_raw` (its pointer).
    PoolRaw(CudaSlice<u8>),
    /// A slice of the stream-ordered pool, given to `register_window_slice`.
    Slice(CudaSlice<u8>),
}

/// Rank `me`'s memory for `case` (`good`: the start of a 2 MiB `cuMemAlloc` allocation), with
/// at least `bytes` usable.
fn bring(gpu: &Arc<Gpu>, case: &str, good: u64, bytes: usize) -> Brought {
    match case {
        "good" => Brought::Raw(good, None),
        "middle" => Brought::Raw(good + 4096, None),
        "small" => {
            let p = raw_alloc(gpu, 64 << 10);
            Brought::Raw(p, Some(p))
        }
        "pool" => Brought::PoolRaw(gpu.stream().alloc_zeros::<u8>(bytes).unwrap()),
        "slice" => Brought::Slice(gpu.stream().alloc_zeros::<u8>(bytes).unwrap()),
        _ => unreachable!("case {case}"),
    }
}

/// What to let go of after the window was freed on every rank.
type After = (Option<u64>, Option<CudaSlice<u8>>);

/// Registers what `brought` holds (`bytes` of it); returns the window, and what to let go of
/// after it ([`After`]).
fn register(comm: &Communicator, gpu: &Arc<Gpu>, brought: Brought, bytes: usize) -> (Result<Window>, After) {
    match brought {
        // SAFETY: freed by the caller after the window was freed on every rank.
        Brought::Raw(ptr, free) => (unsafe { comm.register_window_raw(ptr, bytes) }, (free, None)),
        Brought::PoolRaw(s) => {
            let (ptr, _) = s.device_ptr(gpu.stream());
            // SAFETY: the caller drops the slice after the window was freed on every rank.
            let w = unsafe { comm.register_window_raw(ptr, bytes) };
            (w, (None, Some(s)))
        }
        Brought::Slice(s) => {
            let w = comm.register_window_slice(s);
            if let Ok(w) = &w {
                assert!(w.cuda_slice::<u8>().is_some(), "the window gives its slice back");
                assert!(w.cuda_slice::<u32>().is_none(), "as a slice of its element type only");
                assert_eq!(w.buffer().map(DeviceBuffer::len), Some(bytes), "a view of the slice");
            }
            (w, (None, None))
        }
    }
}

/// Every case of `cases` registered by both ranks (as threads of this process, on GPU `rank %
/// count`), accepted, and data moved through the window by `win_put`.
fn accepted(count: usize, cases: &'static [&'static str]) {
    for &case in cases {
        let chunk = 16 * testing::random_range(1, 128) as usize;
        let data = put_data(chunk);
        let results = on_two_ranks(count, move |me, comm, gpu| -> Result<()> {
            let good = raw_alloc(gpu, EXPORT_GRANULARITY);
            let (w, (free, slice)) = register(comm, gpu, bring(gpu, case, good, 2 * chunk), 2 * chunk);
            let w = w?;
            assert_eq!((w.handle().rank, w.handle().size, w.len()), (me as u32, 2, 2 * chunk), "rank {me}: handle");
            put_through(me, comm, gpu, &w, &data)?;
            w.free()?;
            drop(slice);
            if let Some(p) = free {
                raw_free(gpu, p);
            }
            raw_free(gpu, good);
            Ok(())
        });
        for (r, res) in results.into_iter().enumerate() {
            res.unwrap_or_else(|e| panic!("rank {r}: case {case}: {e}"));
        }
    }
}

/// Ranks as threads of one process on one GPU: any device memory of that GPU makes a window
/// (the middle of an allocation, a small allocation, stream-ordered pool memory as a pointer or
/// as a cudarc `CudaSlice`), and data moves through it.
#[test]
fn any_device_memory_makes_a_window_for_ranks_that_are_threads_on_one_gpu() {
    let test = "any_device_memory_makes_a_window_for_ranks_that_are_threads_on_one_gpu";
    let Some(_) = gpus_or_skip(test, 1) else { return };
    accepted(1, &["middle", "small", "pool", "slice"]);
}

/// Ranks as threads of one process on two GPUs: `cuMemAlloc` memory CUDA IPC cannot map exactly
/// makes a window (peer access reaches it), pool memory is refused on both ranks, naming the
/// rank that brought it.
#[test]
fn on_two_gpus_of_one_process_pool_memory_is_refused_by_name() {
    const NAME: &str = "on_two_gpus_of_one_process_pool_memory_is_refused_by_name";
    // A GPU is required (`MSCCLPP_RS_REQUIRE_GPU`), a second one is not: with one, the case
    // does not exist, and the skip is recorded.
    let Some(gpus) = gpus_or_skip(NAME, 1) else { return };
    if gpus.len() < 2 {
        testing::record_skip(NAME, &format!("needs 2 GPUs, found {}", gpus.len()));
        return;
    }
    accepted(2, &["middle", "small"]);
    for case in ["pool", "slice"] {
        let results = on_two_ranks(2, move |me, comm, gpu| -> std::result::Result<(), String> {
            let good = raw_alloc(gpu, EXPORT_GRANULARITY);
            let (w, after) = register(comm, gpu, bring(gpu, if me == 0 { "good" } else { case }, good, 4096), 4096);
            let e = w.err().ok_or(format!("rank {me}: case {case} was accepted"))?.to_string();
            if !e.contains("rank 1 has memory that ranks on other GPUs of this process cannot reach") {
                return Err(format!("rank {me}: case {case}: {e}"));
            }
            comm.bootstrap().barrier().map_err(|e| e.to_string())?;
            drop(after);
            raw_free(gpu, good);
            Ok(())
        });
        for res in results {
            res.unwrap();
        }
    }
}

/// Memory that is not device memory of the rank's GPU is refused on every rank, naming the rank;
/// rank 0 reads the agreed verdict, rank 1 its own, more precise error.
#[test]
fn memory_that_is_not_device_memory_is_refused_on_every_rank_by_name() {
    let Some(gpus) = gpus_or_skip("memory_that_is_not_device_memory_is_refused_on_every_rank_by_name", 1) else {
        return;
    };
    let count = gpus.len();
    // Rank 1 brings, in turn: a host address, and more bytes than its allocation holds. Rank 0
    // always brings good memory.
    for (case, says) in [
        // (Pageable host memory is unknown to the driver, or host memory where it tracks it.)
        ("host", ["rank 1 has no device memory", "4096 bytes at 0x"]),
        ("beyond", ["rank 1 has no device memory", "its allocation ends"]),
    ] {
        let results = on_two_ranks(count, move |me, comm, gpu| -> std::result::Result<(), String> {
            let good = raw_alloc(gpu, EXPORT_GRANULARITY);
            // Host memory at a 4096-byte boundary (so that only its kind is wrong).
            let host = vec![0u8; 8192];
            let host_at = (host.as_ptr() as u64).next_multiple_of(4096);
            let (ptr, bytes) = match (me, case) {
                (0, _) => (good, 4096),
                (_, "host") => (host_at, 4096),
                _ => (good, 2 * EXPORT_GRANULARITY),
            };
            // SAFETY: every pointer but the refused ones stays allocated past the call (the
            // registration fails on every rank, so no window exists).
            let got = unsafe { comm.register_window_raw(ptr, bytes) };
            let e = got.err().ok_or(format!("rank {me}: case {case} was accepted"))?.to_string();
            if !e.contains(says[me]) {
                return Err(format!("rank {me}: case {case}: {e}"));
            }
            comm.bootstrap().barrier().map_err(|e| e.to_string())?;
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
