//! The frame reader never allocates what a header merely claims: a global allocator records the
//! largest single request made on the test's thread while a hostile frame is read.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use mscclpp_host::Error;
use mscclpp_host::bootstrap::FrameFault;
use mscclpp_host::bootstrap::frame::{self, Kind, Token};

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown happen after the slot is gone.
    let _ = LARGEST.try_with(|c| c.set(c.get().max(size)));
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged;
// recording a size in a const-initialised thread-local `Cell` neither allocates nor unwinds.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, and the caller guarantees `new_size` is valid for `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

const T: Token = Token([5; 16]);

/// Reads `wire` with limit `max` and returns the fault and the largest allocation made meanwhile.
fn read(wire: &[u8], max: usize) -> (FrameFault, usize) {
    LARGEST.with(|c| c.set(0));
    let r = frame::read_frame(&mut &wire[..], &T, max);
    let largest = LARGEST.with(Cell::get);
    match r {
        Err(Error::Frame(f)) => (f, largest),
        other => panic!("expected a rejected frame, got {other:?}"),
    }
}

fn claiming(token: &Token, len: u64, payload: &[u8]) -> Vec<u8> {
    let mut w = frame::encode(token, Kind::Message, 0, payload);
    w[8..16].copy_from_slice(&len.to_le_bytes());
    w
}

#[test]
fn over_the_limit_allocates_nothing_for_the_payload() {
    let (f, largest) = read(&claiming(&T, 1 << 62, b""), 1 << 20);
    assert_eq!(f, FrameFault::TooLong { len: 1 << 62, max: 1 << 20 });
    assert!(largest < 4096, "largest allocation {largest} bytes");
}

#[test]
fn a_truncated_frame_costs_what_arrived_not_what_was_claimed() {
    // 1 GiB claimed and allowed, 100 KiB sent.
    let (f, largest) = read(&claiming(&T, 1 << 30, &vec![1u8; 100 << 10]), 2 << 30);
    assert_eq!(f, FrameFault::Truncated { part: "payload", got: 100 << 10, want: 1 << 30 });
    assert!(largest <= 256 << 10, "largest allocation {largest} bytes");
}

#[test]
fn a_foreign_token_allocates_nothing_for_the_payload() {
    let (f, largest) = read(&claiming(&Token([6; 16]), 1 << 40, b""), usize::MAX);
    assert_eq!(f, FrameFault::WrongToken);
    assert!(largest < 4096, "largest allocation {largest} bytes");
}
