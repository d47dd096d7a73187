//! The default panic handler for kernels: print the location, then `trap;`.
//!
//! A loop here would hang the GPU on a failed bounds check; a trap fails the launch instead and
//! the host sees `CUDA_ERROR_LAUNCH_FAILED`. Disable the `panic-handler` feature to supply your own.
//!
//! The location's file name and a static message are `&str`s that are not NUL-terminated in the
//! binary, and the device's `vprintf` ignores a `%.*s` length. Both are therefore copied into
//! stack buffers of [`crate::poll::LOCATION_CAPACITY`] bytes with a terminating NUL (a longer
//! string is cut and ends in `...`) and printed with plain `%s`.

use crate::poll::{LOCATION_CAPACITY, nul_terminated};

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let (file, line) = info.location().map(|l| (l.file(), l.line())).unwrap_or(("<unknown>", 0));
    let mut file_buf = [0u8; LOCATION_CAPACITY];
    let mut msg_buf = [0u8; LOCATION_CAPACITY];
    let msg = info.message().as_str().unwrap_or("(formatted message not printed on the device)");
    crate::ptx::print::print_panic(nul_terminated(file, &mut file_buf), line, nul_terminated(msg, &mut msg_buf));
    crate::ptx::misc::trap()
}
