//! Device-side messages through the PTX system call `vprintf` (printed by the host at the next
//! synchronize).
//!
//! Every string handed to `%s` is a [`CStr`]: the device's `vprintf` reads up to the NUL, and it
//! does not honour a `*` precision (`%.*s` printed garbage on an H200), so a length cannot bound
//! the read. Strings that are not NUL-terminated in the binary are copied into a stack buffer
//! with a NUL first ([`crate::poll::nul_terminated`]).

#[cfg(any(target_arch = "nvptx64", doc))]
use core::ffi::{CStr, c_char, c_void};

#[cfg(any(target_arch = "nvptx64", doc))]
unsafe extern "C" {
    /// The CUDA device runtime's formatted print: `args` packs each argument at its natural
    /// alignment, in order.
    fn vprintf(format: *const c_char, args: *const c_void) -> i32;
}

#[cfg(any(target_arch = "nvptx64", doc))]
#[repr(C)]
struct FailureArgs {
    msg: *const c_char,
    file: *const c_char,
    line: u32,
    block: u32,
    thread: u32,
}

#[cfg(any(target_arch = "nvptx64", doc))]
#[repr(C)]
struct TimeoutArgs {
    name: *const c_char,
    elapsed_ns: u64,
    block: u32,
    thread: u32,
}

/// `call vprintf` with "mscclpp-device: MSG at FILE:LINE (block B, thread T)".
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(never)]
pub fn print_failure(msg: &CStr, file: &CStr, line: u32) {
    let args = FailureArgs {
        msg: msg.as_ptr(),
        file: file.as_ptr(),
        line,
        block: super::sreg::ctaid_x(),
        thread: super::sreg::tid_x(),
    };
    // SAFETY: the format's conversions match `FailureArgs` field by field; both strings are
    // NUL-terminated (`CStr`).
    unsafe { vprintf(c"mscclpp-device: %s at %s:%u (block %u, thread %u)\n".as_ptr(), (&raw const args).cast()) };
}

/// `call vprintf` with "mscclpp-device: wait NAME timed out after N ns (block B, thread T)".
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(never)]
pub fn print_timeout(name: &CStr, elapsed_ns: u64) {
    let args =
        TimeoutArgs { name: name.as_ptr(), elapsed_ns, block: super::sreg::ctaid_x(), thread: super::sreg::tid_x() };
    // SAFETY: the format's conversions match `TimeoutArgs` field by field; `name` is
    // NUL-terminated (`CStr`).
    unsafe {
        vprintf(
            c"mscclpp-device: wait %s timed out after %llu ns (block %u, thread %u)\n".as_ptr(),
            (&raw const args).cast(),
        )
    };
}

/// `call vprintf` with "mscclpp-device: wait NAME aborted: rank R was lost (block B, thread T)",
/// or "... aborted by the host ..." for the word `u64::MAX` (see [`crate::abort::AbortCause`]).
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(never)]
pub fn print_abort(name: &CStr, word: u64) {
    #[repr(C)]
    struct Requested {
        name: *const c_char,
        block: u32,
        thread: u32,
    }
    #[repr(C)]
    struct Lost {
        name: *const c_char,
        rank: u64,
        block: u32,
        thread: u32,
    }
    let (block, thread) = (super::sreg::ctaid_x(), super::sreg::tid_x());
    if word == u64::MAX {
        let args = Requested { name: name.as_ptr(), block, thread };
        // SAFETY: the format's conversions match `Requested` field by field; `name` is
        // NUL-terminated (`CStr`).
        unsafe {
            vprintf(
                c"mscclpp-device: wait %s aborted by the host (block %u, thread %u)\n".as_ptr(),
                (&raw const args).cast(),
            )
        };
    } else {
        let args = Lost { name: name.as_ptr(), rank: word.wrapping_sub(1), block, thread };
        // SAFETY: the format's conversions match `Lost` field by field; `name` is NUL-terminated.
        unsafe {
            vprintf(
                c"mscclpp-device: wait %s aborted: rank %llu was lost (block %u, thread %u)\n".as_ptr(),
                (&raw const args).cast(),
            )
        };
    }
}

/// `call vprintf` with "mscclpp-device: panic at FILE:LINE: MSG".
#[cfg(any(target_arch = "nvptx64", doc))]
#[inline(never)]
pub fn print_panic(file: &CStr, line: u32, msg: &CStr) {
    #[repr(C)]
    struct Args {
        file: *const c_char,
        line: u32,
        msg: *const c_char,
    }
    let args = Args { file: file.as_ptr(), line, msg: msg.as_ptr() };
    // SAFETY: the format's conversions match `Args`; both strings are NUL-terminated (`CStr`).
    unsafe { vprintf(c"mscclpp-device: panic at %s:%u: %s\n".as_ptr(), (&raw const args).cast()) };
}

// The four wrappers are calls, not instruction forms, so they are not rows: their checks are
// written here (each check kernel calls its wrapper, which stays a function of its own; a test
// holds each wrapper's body to calls of `vprintf` alone).
#[doc(hidden)]
pub const PRINT: &[super::check::Check] = &[
    check_entry!("sm_90", print_failure, [], ["CALL.REL.NOINC", "CALL.ABS.NOINC"], [], [], ["print_failure"]),
    check_entry!("sm_90", print_timeout, [], ["CALL.REL.NOINC", "CALL.ABS.NOINC"], [], [], ["print_timeout"]),
    check_entry!("sm_90", print_panic, [], ["CALL.REL.NOINC", "CALL.ABS.NOINC"], [], [], ["print_panic"]),
    check_entry!("sm_90", print_abort, [], ["CALL.REL.NOINC", "CALL.ABS.NOINC"], [], [], ["print_abort"]),
];
check_kernel!((all()) print_failure, |p: *mut u32| {
    if *p == 1 {
        print_failure(c"check", c"file.rs", 7);
    }
});
check_kernel!((all()) print_timeout, |p: *mut u32| {
    if *p == 1 {
        print_timeout(c"check", 5);
    }
});
check_kernel!((all()) print_panic, |p: *mut u32| {
    if *p == 1 {
        print_panic(c"file.rs", 7, c"m");
    }
});
check_kernel!((all()) print_abort, |p: *mut u32| {
    if *p == 1 {
        print_abort(c"check", 2);
    }
});
