//! Device-side messages through the PTX system call `vprintf` (printed by the host at the next
//! synchronize).

use core::ffi::c_void;

unsafe extern "C" {
    /// The CUDA device runtime's formatted print: `args` packs each argument at its natural
    /// alignment, in order.
    fn vprintf(format: *const u8, args: *const c_void) -> i32;
}

#[repr(C)]
struct FailureArgs {
    msg: *const u8,
    file_len: i32,
    file: *const u8,
    line: u32,
    block: u32,
    thread: u32,
}

#[repr(C)]
struct TimeoutArgs {
    name: *const u8,
    elapsed_ns: u64,
    block: u32,
    thread: u32,
}

/// `call vprintf` with "mscclpp-device: MSG at FILE:LINE (block B, thread T)".
///
/// `msg` must be NUL-terminated; `file` need not be.
#[inline(never)]
pub fn print_failure(msg: &'static str, file: &str, line: u32) {
    let args = FailureArgs {
        msg: msg.as_ptr(),
        file_len: file.len() as i32,
        file: file.as_ptr(),
        line,
        block: super::sreg::ctaid_x(),
        thread: super::sreg::tid_x(),
    };
    // SAFETY: the format's conversions match `FailureArgs` field by field; `msg` is NUL-terminated
    // and `%.*s` bounds the read of `file` by its length.
    unsafe {
        vprintf(c"mscclpp-device: %s at %.*s:%u (block %u, thread %u)\n".as_ptr().cast(), (&raw const args).cast())
    };
}

/// `call vprintf` with "mscclpp-device: wait NAME timed out after N ns (block B, thread T)".
///
/// `name` must be NUL-terminated.
#[inline(never)]
pub fn print_timeout(name: &'static str, elapsed_ns: u64) {
    let args =
        TimeoutArgs { name: name.as_ptr(), elapsed_ns, block: super::sreg::ctaid_x(), thread: super::sreg::tid_x() };
    // SAFETY: the format's conversions match `TimeoutArgs` field by field; `name` is NUL-terminated
    // (callers pass literals ending in "\0").
    unsafe {
        vprintf(
            c"mscclpp-device: wait %s timed out after %llu ns (block %u, thread %u)\n".as_ptr().cast(),
            (&raw const args).cast(),
        )
    };
}

/// `call vprintf` with "mscclpp-device: panic at FILE:LINE: MSG" (MSG only when static).
#[inline(never)]
pub fn print_panic(file: &str, line: u32, msg: Option<&'static str>) {
    #[repr(C)]
    struct Args {
        file_len: i32,
        file: *const u8,
        line: u32,
        msg_len: i32,
        msg: *const u8,
    }
    let m = msg.unwrap_or("(formatted message not printed on the device)");
    let args =
        Args { file_len: file.len() as i32, file: file.as_ptr(), line, msg_len: m.len() as i32, msg: m.as_ptr() };
    // SAFETY: the format's conversions match `Args`; both strings are bounded by `%.*s`.
    unsafe { vprintf(c"mscclpp-device: panic at %.*s:%u: %.*s\n".as_ptr().cast(), (&raw const args).cast()) };
}
