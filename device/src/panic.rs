//! The default panic handler for kernels: print the location, then `trap;`.
//!
//! A loop here would hang the GPU on a failed bounds check; a trap fails the launch instead and
//! the host sees `CUDA_ERROR_LAUNCH_FAILED`. Disable the `panic-handler` feature to supply your own.

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let (file, line) = info.location().map(|l| (l.file(), l.line())).unwrap_or(("<unknown>", 0));
    crate::ptx::print::print_panic(file, line, info.message().as_str());
    crate::ptx::misc::trap()
}
