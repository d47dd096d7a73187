//! The arena layout's stated invariant, on fresh random plans: every region starts on a 256-byte
//! boundary, the arena is a whole number of 256-byte blocks, and the regions do not overlap.

use mscclpp_executor::{Layout, encode};
use mscclpp_plan::{Chunk, Program};
use rand::RngExt;

/// The alignment the encoder states for the arena's regions.
const ALIGN: u64 = 256;

/// Exists for a planted bug the other tests let through: the arena's regions no longer aligned
/// to their stated 256 bytes (nothing asserted the invariant, and the test chunk sizes were
/// multiples of 256 anyway). Chunk sizes here are random multiples of 16, buffer sizes random
/// chunk counts, with plain and with packet (double-buffered) scratch, on every rank's layout.
#[test]
fn every_region_starts_on_a_256_byte_boundary() {
    let mut rng = rand::rng();
    for trial in 0..200 {
        let n = rng.random_range(1..=4usize);
        let chunk_bytes = 16 * rng.random_range(1..=100u64);
        let packets = rng.random_bool(0.5);
        let mut p = Program::new("layout", "test", n, 1, 1, 1);
        for r in 0..n {
            let (i, o, s) = (rng.random_range(1..=9), rng.random_range(1..=9), rng.random_range(1..=9));
            p.set_buffers(r, i, o, s).unwrap();
        }
        let r0 = p.rank(0).unwrap();
        if packets {
            r0.copy_packets(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        } else {
            r0.copy(&mut p, Chunk::scratch(0, 0, 1), Chunk::input(0, 0, 1), 0).unwrap();
        }
        let e = encode(&p, 0, chunk_bytes).unwrap();
        for (r, l) in e.layouts.iter().enumerate() {
            let case = format!(
                "trial {trial}: rank {r} of {n}, chunks of {chunk_bytes} bytes, {} scratch: {l:?}",
                if packets { "packet" } else { "plain" }
            );
            check(&p, r, chunk_bytes, packets, l, &case);
        }
    }
}

fn check(p: &Program, r: usize, chunk_bytes: u64, packets: bool, l: &Layout, case: &str) {
    let rp = &p.ranks[r];
    for (what, v) in [("input", l.input), ("output", l.output), ("scratch", l.scratch), ("packet copy", l.pkt_shift)] {
        assert_eq!(v % ALIGN, 0, "{case}: {what} at {v}");
    }
    assert_eq!(l.bytes % ALIGN, 0, "{case}: an arena of {} bytes", l.bytes);
    assert_eq!(l.input_bytes, rp.input_chunks as u64 * chunk_bytes, "{case}");
    assert_eq!(l.output_bytes, rp.output_chunks as u64 * chunk_bytes, "{case}");
    assert!(l.input + l.input_bytes <= l.output, "{case}: input overlaps output");
    assert!(l.output + l.output_bytes <= l.scratch, "{case}: output overlaps scratch");
    let stride = if packets { 2 * chunk_bytes } else { chunk_bytes };
    let scratch = rp.scratch_chunks as u64 * stride;
    if packets {
        assert!(l.pkt_shift >= scratch, "{case}: packet copies overlap");
        assert!(l.scratch + 2 * l.pkt_shift <= l.bytes, "{case}: scratch past the arena");
    } else {
        assert_eq!(l.pkt_shift, 0, "{case}");
        assert!(l.scratch + scratch <= l.bytes, "{case}: scratch past the arena");
    }
}
