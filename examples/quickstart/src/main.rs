// src/main.rs
use mscclpp_host::cudarc::driver::sys::CUevent_flags;
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};

const PTX: &str = include_str!(env!("KERNELS_PTX"));
const BYTES: usize = 4096; // bulk copies move multiples of 16 bytes

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match mscclpp_host::gpu::devices() {
        // No driver, or a driver that reports no device; a driver that fails is an error.
        Err(e) if e.is_no_gpu() => {
            println!("no GPU, nothing to run: {e}");
            return Ok(());
        }
        devices => devices?,
    };
    let gpu = Gpu::open(0)?;
    let src = DeviceBuffer::from_slice(&gpu, &[7u8; BYTES])?;
    let dst = DeviceBuffer::alloc(&gpu, BYTES)?;
    mscclpp_host::bulk::validate_copy(dst.addr(), src.addr(), BYTES as u64)?; // clear error before launch
    let args = Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(BYTES as u32);
    let config = LaunchConfig::new(1, 32).shared(128 + BYTES as u32); // barrier slot + tile

    let start = gpu.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let stop = gpu.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    start.record(gpu.stream())?;
    // SAFETY: the arguments match copy_tile's signature, both buffers hold BYTES bytes (16-byte
    // aligned allocations), and the launch has the shared memory the kernel documents.
    unsafe { gpu.launch(PTX, "copy_tile", config, args)? };
    stop.record(gpu.stream())?;
    gpu.synchronize()?;

    if dst.to_vec::<u8>()? != [7u8; BYTES] {
        return Err("copy_tile: wrong bytes in dst".into());
    }
    println!("copy_tile: {BYTES} bytes in {:.1} us", start.elapsed_ms(&stop)? * 1e3);
    Ok(())
}
