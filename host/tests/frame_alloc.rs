//! The frame reader never allocates what a header merely claims: a global allocator records the
//! largest single request made on the test's thread while a hostile frame is read.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use mscclpp_host::bootstrap::{FrameError, FrameFault};
use mscclpp_host::frame::{self, Kind, Token};

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
        Err(FrameError::Rejected(f)) => (f, largest),
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

/// Reads frames from `wire` until it ends or a frame is rejected; checks that no single read
/// allocates more than the bytes it was actually given could justify.
fn read_all_bounded(wire: &[u8], max: usize) -> Result<(), String> {
    let mut r = wire;
    loop {
        let available = r.len();
        LARGEST.with(|c| c.set(0));
        let res = frame::read_frame(&mut r, &T, max);
        let largest = LARGEST.with(Cell::get);
        // The payload buffer starts at 64 KiB and doubles only as bytes arrive; it never exceeds
        // the limit. 4 KiB of slack for the small allocations of an error message.
        let bound = max.min((64usize << 10).max(2 * available)) + 4096;
        if largest > bound {
            return Err(format!("allocated {largest} bytes reading {available} bytes (limit {max}, bound {bound})"));
        }
        match res {
            Ok(Some(f)) => {
                if f.payload.len() > max {
                    return Err(format!("accepted a {}-byte payload over the {max}-byte limit", f.payload.len()));
                }
            }
            Ok(None) | Err(_) => return Ok(()),
        }
    }
}

fn limits() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(64), Just(4096), Just(1 << 20), Just(usize::MAX)]
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes, with or without a valid magic, version and tag in front.
    #[test]
    fn arbitrary_bytes_never_panic_or_overallocate(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..3000),
        prefix in 0usize..4,
        max in limits(),
    ) {
        if prefix > 0 && bytes.len() >= frame::HEADER_LEN {
            // Keep some headers plausible so the fuzz reaches the length and payload paths.
            let valid = frame::encode(&T, Kind::Message, 0, b"");
            let n = [4, 5, frame::HEADER_LEN][prefix - 1];
            bytes[..n].copy_from_slice(&valid[..n]);
            if prefix == 3 {
                // Any claimed length.
                let claimed = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) >> (bytes[0] % 64);
                bytes[8..16].copy_from_slice(&claimed.to_le_bytes());
            }
        }
        prop_assert_eq!(read_all_bounded(&bytes, max), Ok(()));
    }

    /// Valid frames with a few bytes flipped, a cut, and sometimes a forged length.
    #[test]
    fn mutated_frames_never_panic_or_overallocate(
        frames in proptest::collection::vec(
            (1u8..=8, any::<u64>(), proptest::collection::vec(any::<u8>(), 0..400)), 1..6),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..6),
        cut in any::<prop::sample::Index>(),
        forged_len in proptest::option::of(any::<u64>()),
        max in limits(),
    ) {
        let mut wire = Vec::new();
        for (k, seq, p) in &frames {
            frame::write_frame(&mut wire, &T, Kind::from_u8(*k).unwrap(), *seq, p).unwrap();
        }
        if let Some(len) = forged_len {
            wire[8..16].copy_from_slice(&len.to_le_bytes());
        }
        for (at, x) in &flips {
            let i = at.index(wire.len());
            wire[i] ^= x;
        }
        let keep = cut.index(wire.len() + 1);
        prop_assert_eq!(read_all_bounded(&wire[..keep], max), Ok(()));
    }
}
