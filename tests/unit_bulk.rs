//! Single-GPU and two-GPU tests of the bulk-copy primitives (verification tiers 4 and 6).
//! Fresh random inputs every run, poisoned outputs, results compared on the host.

use std::sync::Arc;

use half::{bf16, f16};
use mscclpp_host::{Args, DeviceBuffer, Gpu, LaunchConfig};
use mscclpp_rs::testing::{self, DeviceMessage, POISON, assert_same, gpus_or_skip};
use mscclpp_rs::{PTX, PTX_CHECKED};

fn launch(g: &Arc<Gpu>, ptx: &'static str, name: &str, cfg: LaunchConfig, args: Args) {
    // SAFETY: each call site passes the kernel's parameters in order with matching types, and
    // the buffers outlive the synchronize below.
    unsafe { g.launch(ptx, name, cfg, args) }.unwrap_or_else(|e| panic!("{name}: {e}"));
    g.synchronize().unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn roundtrip(g: &Arc<Gpu>, bytes: usize) {
    let data = testing::random_bytes(bytes);
    let src = DeviceBuffer::from_slice(g, &data).unwrap();
    let dst = DeviceBuffer::filled(g, bytes, POISON).unwrap();
    launch(
        g,
        PTX,
        "bulk_roundtrip",
        LaunchConfig::new(1, 32).shared(128 + bytes as u32),
        Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u32),
    );
    assert_same(&format!("round trip of {bytes} bytes"), &dst.to_vec::<u8>().unwrap(), &data);
}

#[test]
fn bulk_roundtrip_sizes_16_bytes_to_the_shared_limit() {
    let Some(g) = gpus_or_skip("bulk_roundtrip_sizes_16_bytes_to_the_shared_limit", 1) else { return };
    let g = &g[0];
    // Powers of two, odd multiples of 16, 200,000 and the 227 KiB limit (minus the barrier slot).
    let limit = g.info().max_shared_optin as usize - 128;
    let mut sizes = vec![16, 32, 48, 112, 1008, 4096, 4112, 65_536, 100_000, 131_072, 199_984, 200_000, limit];
    for _ in 0..8 {
        sizes.push(testing::random_range(1, (limit / 16) as u64 + 1) as usize * 16);
    }
    for bytes in sizes {
        roundtrip(g, bytes);
    }
}

#[test]
fn bulk_gather_several_sources_one_phase() {
    let Some(g) = gpus_or_skip("bulk_gather_several_sources_one_phase", 1) else { return };
    let g = &g[0];
    let (n, tile) = (6usize, 4096usize);
    let tiles: Vec<Vec<u32>> = (0..n).map(|_| testing::random_ints::<u32>(tile / 4)).collect();
    let bufs: Vec<DeviceBuffer> = tiles.iter().map(|t| DeviceBuffer::from_slice(g, t).unwrap()).collect();
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.addr()).collect();
    let table = DeviceBuffer::from_slice(g, &ptrs).unwrap();
    let dst = DeviceBuffer::filled(g, n * tile, POISON).unwrap();
    launch(
        g,
        PTX,
        "bulk_gather",
        LaunchConfig::new(1, 256).shared((128 + n * tile) as u32),
        Args::new().arg(dst.addr()).arg(table.addr()).arg(n as u32).arg(tile as u32),
    );
    let want: Vec<u32> = tiles.concat();
    assert_same("gathered tiles", &dst.to_vec::<u32>().unwrap(), &want);
}

#[test]
fn bulk_barrier_reused_for_1500_phases() {
    let Some(g) = gpus_or_skip("bulk_barrier_reused_for_1500_phases", 1) else { return };
    let g = &g[0];
    let (phases, tile) = (1500usize, 1024usize);
    let data = testing::random_bytes(phases * tile);
    let src = DeviceBuffer::from_slice(g, &data).unwrap();
    let dst = DeviceBuffer::filled(g, data.len(), POISON).unwrap();
    launch(
        g,
        PTX,
        "bulk_barrier_reuse",
        LaunchConfig::new(1, 128).shared((128 + tile) as u32),
        Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(tile as u32).arg(phases as u32),
    );
    assert_same("1500 phases", &dst.to_vec::<u8>().unwrap(), &data);
}

#[test]
fn bulk_store_double_buffered_pipeline() {
    let Some(g) = gpus_or_skip("bulk_store_double_buffered_pipeline", 1) else { return };
    let g = &g[0];
    let (tiles, tile) = (64usize, 8192usize);
    let words = tile / 4;
    let input = testing::random_ints::<u32>(tiles * words);
    let src = DeviceBuffer::from_slice(g, &input).unwrap();
    let dst = DeviceBuffer::filled(g, tiles * tile, POISON).unwrap();
    launch(
        g,
        PTX,
        "bulk_store_double_buffer",
        LaunchConfig::new(1, 256).shared((2 * tile) as u32),
        Args::new().arg(dst.ptr::<u32>()).arg(src.addr()).arg(tiles as u32).arg(tile as u32),
    );
    let want: Vec<u32> =
        input.iter().enumerate().map(|(i, &x)| x.wrapping_mul(3).wrapping_add((i / words) as u32)).collect();
    assert_same("double-buffered store", &dst.to_vec::<u32>().unwrap(), &want);
}

#[test]
fn bulk_copy_pipeline_stages_and_odd_sizes() {
    let Some(g) = gpus_or_skip("bulk_copy_pipeline_stages_and_odd_sizes", 1) else { return };
    let g = &g[0];
    for (kernel, stages) in [("bulk_copy_s2", 2u32), ("bulk_copy_s3", 3), ("bulk_copy_s4", 4)] {
        for (bytes, tile, grid) in
            [(16usize, 1024u32, 1u32), (1_000_016, 16_384, 7), (5_242_880, 32_768, 132), (4_000_000, 8192, 264)]
        {
            let data = testing::random_bytes(bytes);
            let src = DeviceBuffer::from_slice(g, &data).unwrap();
            let dst = DeviceBuffer::filled(g, bytes, POISON).unwrap();
            let smem = mscclpp_device::bulk::pipeline_smem_bytes(stages, tile);
            launch(
                g,
                PTX,
                kernel,
                LaunchConfig::new(grid, 32).shared(smem),
                Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u64).arg(tile),
            );
            assert_same(&format!("{kernel} {bytes} B tile {tile} grid {grid}"), &dst.to_vec::<u8>().unwrap(), &data);
        }
    }
}

/// Runs one reduce kernel on random `src` into a random non-zero `dst` and returns the result.
fn reduce_case<T: bytemuck::Pod>(g: &Arc<Gpu>, kernel: &str, src: &[T], dst0: &[T]) -> Vec<T> {
    let bytes = std::mem::size_of_val(src);
    let s = DeviceBuffer::from_slice(g, src).unwrap();
    let d = DeviceBuffer::from_slice(g, dst0).unwrap();
    launch(
        g,
        PTX,
        kernel,
        LaunchConfig::new(1, 32).shared(128 + bytes as u32),
        Args::new().arg(d.ptr::<T>()).arg(s.ptr::<T>()).arg(bytes as u32),
    );
    d.to_vec::<T>().unwrap()
}

fn nonzero<T: bytemuck::Pod + PartialEq>(v: Vec<T>) -> Vec<T> {
    let zero = T::zeroed();
    v.into_iter().map(|x| if x == zero { bytemuck::cast_slice::<u8, T>(&[1u8; 16])[0] } else { x }).collect()
}

fn check_ints<T>(g: &Arc<Gpu>, kernel: &str, n: usize, f: impl Fn(T, T) -> T)
where
    T: bytemuck::Pod + PartialEq + std::fmt::Debug,
{
    let src = testing::random_ints::<T>(n);
    let dst0 = nonzero(testing::random_ints::<T>(n));
    let got = reduce_case(g, kernel, &src, &dst0);
    let want: Vec<T> = dst0.iter().zip(&src).map(|(&d, &s)| f(d, s)).collect();
    assert_same(kernel, &got, &want);
}

/// Floats: every result must have exactly the bits of the host's reference: the correctly rounded
/// sum (round to nearest even, as the bulk reduce add is specified) or the min / max as PTX
/// defines it (`pick`). The references are exact, so no tolerance.
fn check_floats<T, B>(
    g: &Arc<Gpu>,
    kernel: &str,
    src: Vec<T>,
    dst0: Vec<T>,
    f: impl Fn(T, T) -> T,
    bits: impl Fn(T) -> B,
) where
    T: bytemuck::Pod + std::fmt::Debug,
    B: PartialEq + std::fmt::LowerHex,
{
    let got = reduce_case(g, kernel, &src, &dst0);
    let bad: Vec<usize> = (0..src.len()).filter(|&i| bits(got[i]) != bits(f(dst0[i], src[i]))).collect();
    if let Some(&i) = bad.first() {
        let want = f(dst0[i], src[i]);
        panic!(
            "{kernel}: {} of {} elements differ; first [{i}]: {:?} op {:?} gave {:?} ({:#x}), want {:?} ({:#x})",
            bad.len(),
            src.len(),
            dst0[i],
            src[i],
            got[i],
            bits(got[i]),
            want,
            bits(want)
        );
    }
}

/// PTX's `min` (`max` with `max`) of two numbers: the smaller (larger); -0 counts as below +0. True
/// to take `a`. (No NaN in these tests.)
fn pick(a: f32, b: f32, max: bool) -> bool {
    if a == b {
        // Equal values, or +0 and -0: min takes the negative one, max the positive one.
        a.is_sign_negative() != max
    } else {
        (a < b) != max
    }
}

/// Inputs for min / max: every pair of `specials` (both signs of zero, of infinity, of the
/// smallest and largest subnormal and of the largest finite value, the smallest normal, one)
/// first, then random finite values; returned as (destination, source).
fn min_max_inputs<T: Copy>(specials: &[T], random: impl Fn(usize) -> Vec<T>, n: usize) -> (Vec<T>, Vec<T>) {
    let (mut d, mut s) = (random(n), random(n));
    let pairs = specials.iter().flat_map(|&a| specials.iter().map(move |&b| (a, b)));
    for (i, (a, b)) in pairs.enumerate() {
        (d[i], s[i]) = (a, b);
    }
    (d, s)
}

#[test]
fn bulk_reduce_store_every_type_and_op() {
    let Some(g) = gpus_or_skip("bulk_reduce_store_every_type_and_op", 1) else { return };
    let g = &g[0];
    let n = 4096 + 16 * testing::random_range(0, 64) as usize; // up to ~5 KiB elements, multiple of 16
    // Integers: exact.
    check_ints::<u32>(g, "bulk_reduce_add_u32", n, u32::wrapping_add);
    check_ints::<i32>(g, "bulk_reduce_add_i32", n, i32::wrapping_add);
    check_ints::<u64>(g, "bulk_reduce_add_u64", n, u64::wrapping_add);
    check_ints::<u32>(g, "bulk_reduce_min_u32", n, u32::min);
    check_ints::<i32>(g, "bulk_reduce_min_i32", n, i32::min);
    check_ints::<u64>(g, "bulk_reduce_min_u64", n, u64::min);
    check_ints::<i64>(g, "bulk_reduce_min_i64", n, i64::min);
    check_ints::<u32>(g, "bulk_reduce_max_u32", n, u32::max);
    check_ints::<i32>(g, "bulk_reduce_max_i32", n, i32::max);
    check_ints::<u64>(g, "bulk_reduce_max_u64", n, u64::max);
    check_ints::<i64>(g, "bulk_reduce_max_i64", n, i64::max);
    // inc/dec with PTX semantics; small ranges so both branches are taken often.
    let small = |n| testing::random_ints::<u32>(n).into_iter().map(|x| x % 64 + 1).collect::<Vec<u32>>();
    let (s, d) = (small(n), small(n));
    let got = reduce_case(g, "bulk_reduce_inc_u32", &s, &d);
    let want: Vec<u32> = d.iter().zip(&s).map(|(&o, &b)| if o >= b { 0 } else { o + 1 }).collect();
    assert_same("bulk_reduce_inc_u32", &got, &want);
    let (s, d) = (small(n), small(n));
    let got = reduce_case(g, "bulk_reduce_dec_u32", &s, &d);
    let want: Vec<u32> = d.iter().zip(&s).map(|(&o, &b)| if o == 0 || o > b { b } else { o - 1 }).collect();
    assert_same("bulk_reduce_dec_u32", &got, &want);
    check_ints::<u32>(g, "bulk_reduce_and_u32", n, |a, b| a & b);
    check_ints::<i32>(g, "bulk_reduce_and_i32", n, |a, b| a & b);
    check_ints::<u64>(g, "bulk_reduce_and_u64", n, |a, b| a & b);
    check_ints::<i64>(g, "bulk_reduce_and_i64", n, |a, b| a & b);
    check_ints::<u32>(g, "bulk_reduce_or_u32", n, |a, b| a | b);
    check_ints::<i32>(g, "bulk_reduce_or_i32", n, |a, b| a | b);
    check_ints::<u64>(g, "bulk_reduce_or_u64", n, |a, b| a | b);
    check_ints::<i64>(g, "bulk_reduce_or_i64", n, |a, b| a | b);
    check_ints::<u32>(g, "bulk_reduce_xor_u32", n, |a, b| a ^ b);
    check_ints::<i32>(g, "bulk_reduce_xor_i32", n, |a, b| a ^ b);
    check_ints::<u64>(g, "bulk_reduce_xor_u64", n, |a, b| a ^ b);
    check_ints::<i64>(g, "bulk_reduce_xor_i64", n, |a, b| a ^ b);

    // Float sums: random finite values, non-zero destinations; the host's sum rounded once to the
    // type (f16 and bf16 through f32, where the sum of two of them rounds to the same value).
    let f32s = |n| testing::random_f32(n, -1000.0, 1000.0);
    check_floats(g, "bulk_reduce_add_f32", f32s(n), f32s(n), |a, b| a + b, f32::to_bits);
    let f64s = |n| testing::random_f64(n, -1e6, 1e6);
    check_floats(g, "bulk_reduce_add_f64", f64s(n), f64s(n), |a, b| a + b, f64::to_bits);
    let h = |n| f32s(n).into_iter().map(|x| f16::from_f32(x / 16.0)).collect::<Vec<f16>>();
    check_floats(g, "bulk_reduce_add_f16", h(n), h(n), |a, b| f16::from_f32(a.to_f32() + b.to_f32()), f16::to_bits);
    let bh = |n| f32s(n).into_iter().map(bf16::from_f32).collect::<Vec<bf16>>();
    check_floats(
        g,
        "bulk_reduce_add_bf16",
        bh(n),
        bh(n),
        |a, b| bf16::from_f32(a.to_f32() + b.to_f32()),
        bf16::to_bits,
    );
    // Min / max: the special values against each other, then random ones.
    let f16_specials: Vec<f16> =
        [0x0000u16, 0x8000, 0x7c00, 0xfc00, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x7bff, 0xfbff, 0x0400, 0x3c00]
            .into_iter()
            .map(f16::from_bits)
            .collect();
    let bf16_specials: Vec<bf16> =
        [0x0000u16, 0x8000, 0x7f80, 0xff80, 0x0001, 0x8001, 0x007f, 0x807f, 0x7f7f, 0xff7f, 0x0080, 0x3f80]
            .into_iter()
            .map(bf16::from_bits)
            .collect();
    for max in [false, true] {
        let op = if max { "max" } else { "min" };
        let (d, s) = min_max_inputs(&f16_specials, h, n);
        let f = |a: f16, b: f16| if pick(a.to_f32(), b.to_f32(), max) { a } else { b };
        check_floats(g, &format!("bulk_reduce_{op}_f16"), s, d, f, f16::to_bits);
        let (d, s) = min_max_inputs(&bf16_specials, bh, n);
        let f = |a: bf16, b: bf16| if pick(a.to_f32(), b.to_f32(), max) { a } else { b };
        check_floats(g, &format!("bulk_reduce_{op}_bf16"), s, d, f, bf16::to_bits);
    }
}

#[test]
fn min_max_reference_orders_signed_zeros() {
    // CPU: the reference the GPU's min / max results are compared with bit for bit.
    let (z, nz) = (0.0f32, -0.0f32);
    for (a, b, max, want) in [(z, nz, false, nz), (nz, z, false, nz), (z, nz, true, z), (nz, z, true, z)] {
        let got = if pick(a, b, max) { a } else { b };
        assert_eq!(got.to_bits(), want.to_bits(), "{}({a}, {b})", if max { "max" } else { "min" });
    }
    assert!(!pick(f32::INFINITY, 1.0, false) && pick(f32::INFINITY, 1.0, true));
    assert!(pick(f32::NEG_INFINITY, -1e30, false) && !pick(f32::NEG_INFINITY, -1e30, true));
    let sub = f32::from_bits(1);
    assert!(pick(sub, 2.0 * sub, false) && !pick(sub, z, false) && pick(nz, sub, false));
}

#[test]
fn bulk_bad_input_is_rejected_on_the_host() {
    // No GPU needed: the host validates before any launch.
    use mscclpp_host::bulk::{validate_copy, validate_shared};
    assert!(validate_copy(0x10000, 0x20000, 200_000).is_ok());
    for (dst, src, bytes, why) in [
        (0x10008, 0x20000, 4096, "destination is not 16-byte aligned"),
        (0x10000, 0x20004, 4096, "source is not 16-byte aligned"),
        (0x10000, 0x20000, 4100, "multiple of 16"),
        (0x10000, 0x20000, 0, "size is zero"),
    ] {
        let e = validate_copy(dst, src, bytes).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    if let Some(g) = gpus_or_skip("bulk_bad_input_is_rejected_on_the_host (shared limit)", 1) {
        let e = validate_shared(g[0].info(), 300 * 1024).unwrap_err();
        assert!(e.to_string().contains("exceed"), "{e}");
        // The launch helper refuses too, before the driver sees the launch.
        // SAFETY: the launch is rejected before any kernel runs.
        let r = unsafe { g[0].launch(PTX, "bulk_roundtrip", LaunchConfig::new(1, 32).shared(300 * 1024), Args::new()) };
        assert!(r.unwrap_err().to_string().contains("dynamic shared memory"));
    }
}

#[test]
fn launch_with_wrong_arguments_is_refused_naming_the_kernel() {
    let Some(g) = gpus_or_skip("launch_with_wrong_arguments_is_refused_naming_the_kernel", 1) else { return };
    let g = &g[0];
    // `bulk_roundtrip(dst: GlobalPtr<u8>, src: GlobalPtr<u8>, bytes: u32)`, as the driver sees it.
    let Some(sizes) = g.param_sizes(PTX, "bulk_roundtrip").unwrap() else {
        // Without the description the launch would not be checked: never launch it then.
        testing::record_skip(
            "launch_with_wrong_arguments_is_refused_naming_the_kernel",
            "the driver cannot describe kernel parameters (cuFuncGetParamInfo needs a CUDA 12.4 driver)",
        );
        return;
    };
    assert_eq!(sizes, [8, 8, 4], "bulk_roundtrip's parameters as the driver describes them");
    let bytes = 4096usize;
    let data = testing::random_bytes(bytes);
    let src = DeviceBuffer::from_slice(g, &data).unwrap();
    let dst = DeviceBuffer::filled(g, bytes, POISON).unwrap();
    let cfg = LaunchConfig::new(1, 32).shared(128 + bytes as u32);
    let wrong = [
        (Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()), vec![8, 8]),
        (Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u64), vec![8, 8, 8]),
        (Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u32).arg(0u32), vec![8, 8, 4, 4]),
    ];
    for (args, given) in wrong {
        // SAFETY: the driver describes the kernel (checked above), so a launch whose arguments
        // differ in number or size is refused before it reaches the GPU.
        let r = unsafe { g.launch(PTX, "bulk_roundtrip", cfg, args) };
        match r {
            Err(mscclpp_host::Error::KernelArguments { kernel, expected, given: got }) => {
                assert_eq!((kernel.as_str(), expected, got), ("bulk_roundtrip", vec![8, 8, 4], given));
            }
            other => panic!("{given:?}: expected a refused launch, got {other:?}"),
        }
    }
    // Nothing ran (the destination still holds the poison), and the right arguments work.
    g.synchronize().unwrap();
    assert_same("destination after the refused launches", &dst.to_vec::<u8>().unwrap(), &vec![POISON; bytes]);
    launch(g, PTX, "bulk_roundtrip", cfg, Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u32));
    assert_same("round trip after the refused launches", &dst.to_vec::<u8>().unwrap(), &data);
}

#[test]
fn bulk_misaligned_size_traps_in_a_checked_build() {
    const NAME: &str = "bulk_misaligned_size_traps_in_a_checked_build";
    if testing::is_child(NAME) {
        let g = testing::all_gpus().unwrap();
        let g = &g[0];
        let src = DeviceBuffer::filled(g, 4096, 1).unwrap();
        let dst = DeviceBuffer::filled(g, 4096, 0).unwrap();
        // 24 bytes: not a multiple of 16. The checked build must trap, not corrupt or hang.
        // SAFETY: valid buffers; the kernel is expected to trap on its argument check.
        unsafe {
            g.launch(
                PTX_CHECKED,
                "bulk_roundtrip",
                LaunchConfig::new(1, 32).shared(4096 + 128),
                Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(24u32),
            )
        }
        .unwrap();
        let e = g.synchronize().expect_err("the checked kernel must fail");
        println!("CHILD-SAW: {e}");
        return;
    }
    if gpus_or_skip(NAME, 1).is_none() {
        return;
    }
    let out = testing::run_child(NAME);
    let text = testing::output_text(&out);
    assert!(out.status.success(), "child failed:\n{text}");
    // The whole line: the message, the kernel's own call site, file and line (the copies are
    // #[track_caller]), a block and thread inside the launch.
    let line = testing::line_of(include_str!("../ptx-tests/src/bulk.rs"), testing::TRAP_SITE_BULK_SIZE);
    let want =
        DeviceMessage::Failure { msg: "bulk copy size is not a multiple of 16 bytes", file: "src/bulk.rs", line };
    if let Err(e) = testing::check_device_messages(&text, want, 1, 32) {
        panic!("{e}");
    }
    assert!(text.contains("CHILD-SAW") && text.contains("LAUNCH_FAILED"), "no launch failure seen:\n{text}");
}

#[test]
fn bulk_wait_that_never_completes_traps_within_its_budget() {
    const NAME: &str = "bulk_wait_that_never_completes_traps_within_its_budget";
    if testing::is_child(NAME) {
        let g = testing::all_gpus().unwrap();
        let g = &g[0];
        let t = std::time::Instant::now();
        // SAFETY: the kernel takes one i64.
        unsafe {
            g.launch(PTX, "bulk_wait_timeout", LaunchConfig::new(1, 32).shared(256), Args::new().arg(50_000_000i64))
        }
        .unwrap();
        let e = g.synchronize().expect_err("the wait must trap");
        println!("CHILD-SAW after {:?}: {e}", t.elapsed());
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "trap took {:?}", t.elapsed());
        return;
    }
    if gpus_or_skip(NAME, 1).is_none() {
        return;
    }
    let out = testing::run_child(NAME);
    let text = testing::output_text(&out);
    assert!(out.status.success(), "child failed:\n{text}");
    let want = DeviceMessage::Timeout { name: "BulkBarrier::wait", budget_ns: 50_000_000 };
    if let Err(e) = testing::check_device_messages(&text, want, 1, 32) {
        panic!("{e}");
    }
    assert!(text.contains("LAUNCH_FAILED"), "no launch failure:\n{text}");
}

#[test]
fn bulk_store_and_reduce_into_a_peer_gpu() {
    let Some(g) = testing::peers_or_skip("bulk_store_and_reduce_into_a_peer_gpu") else { return };
    let (g0, g1) = (&g[0], &g[1]);
    g0.enable_peer_access(g1).unwrap();
    g1.enable_peer_access(g0).unwrap();
    let bytes = 8 << 20;
    // Bulk store GPU 0 -> GPU 1.
    let data = testing::random_bytes(bytes);
    let src = DeviceBuffer::from_slice(g0, &data).unwrap();
    let dst = DeviceBuffer::filled(g1, bytes, POISON).unwrap();
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(3, 32768);
    launch(
        g0,
        PTX,
        "bulk_copy_s3",
        LaunchConfig::new(132, 32).shared(smem),
        Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u64).arg(32768u32),
    );
    assert_same("peer bulk store", &dst.to_vec::<u8>().unwrap(), &data);

    // Bulk reduce-store (f32 add) GPU 0 -> GPU 1 into random non-zero values.
    let n = bytes / 4;
    let a = testing::random_f32(n, -100.0, 100.0);
    let b = testing::random_f32(n, -100.0, 100.0);
    let src = DeviceBuffer::from_slice(g0, &a).unwrap();
    let dst = DeviceBuffer::from_slice(g1, &b).unwrap();
    launch(
        g0,
        PTX,
        "bulk_reduce_stream_f32",
        LaunchConfig::new(132, 32).shared(smem),
        Args::new().arg(dst.ptr::<u8>()).arg(src.ptr::<u8>()).arg(bytes as u64).arg(32768u32),
    );
    // Exact: the bits of the correctly rounded sum.
    let want: Vec<u32> = a.iter().zip(&b).map(|(x, y)| (x + y).to_bits()).collect();
    assert_same("peer bulk reduce f32 (bits)", &dst.to_vec::<u32>().unwrap(), &want);
}

#[test]
fn bulk_concurrent_reduce_from_two_gpus_is_exact() {
    let Some(g) = testing::peers_or_skip("bulk_concurrent_reduce_from_two_gpus_is_exact") else { return };
    let (g0, g1) = (&g[0], &g[1]);
    g0.enable_peer_access(g1).unwrap();
    g1.enable_peer_access(g0).unwrap();
    let n = 1 << 20; // u64 elements: 8 MiB
    let reps = 8u32;
    let a = testing::random_ints::<u64>(n).into_iter().map(|x| x >> 8).collect::<Vec<u64>>();
    let b = testing::random_ints::<u64>(n).into_iter().map(|x| x >> 8).collect::<Vec<u64>>();
    let init = testing::random_ints::<u64>(n).into_iter().map(|x| x >> 8).collect::<Vec<u64>>();
    let sa = DeviceBuffer::from_slice(g0, &a).unwrap();
    let sb = DeviceBuffer::from_slice(g1, &b).unwrap();
    let acc = DeviceBuffer::from_slice(g1, &init).unwrap();
    let smem = mscclpp_device::bulk::pipeline_smem_bytes(3, 16384);
    let cfg = LaunchConfig::new(132, 32).shared(smem);
    // Both launches first, then both synchronizes: the two GPUs accumulate at the same time.
    for (gpu, src) in [(g0, &sa), (g1, &sb)] {
        // SAFETY: parameters match `bulk_reduce_stream_u64`; buffers outlive the synchronizes.
        unsafe {
            gpu.launch(
                PTX,
                "bulk_reduce_stream_u64",
                cfg,
                Args::new().arg(acc.ptr::<u8>()).arg(src.ptr::<u8>()).arg((n * 8) as u64).arg(16384u32).arg(reps),
            )
        }
        .unwrap();
    }
    g0.synchronize().unwrap();
    g1.synchronize().unwrap();
    let want: Vec<u64> =
        (0..n).map(|i| init[i].wrapping_add((reps as u64).wrapping_mul(a[i].wrapping_add(b[i])))).collect();
    assert_same("two GPUs reducing into one buffer", &acc.to_vec::<u64>().unwrap(), &want);
}
