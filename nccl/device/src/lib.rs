//! Device code shared by `mscclpp-nccl` (the host library with NCCL's C interface) and its
//! kernel crate: the `#[repr(C)]` arguments the kernels take by value, and the element arithmetic
//! of every NCCL data type and reduction.
//!
//! The kernels are deliberately simple and general (any element alignment, any count, every
//! type and operation); the library uses the faster `mscclpp-collectives` kernels where they
//! apply (sums of f32, f16, bf16, i32 and u32) and these everywhere else:
//!
//! ```text
//!  nccl_copy     CopyList: up to MAX_COPIES (dst, src, bytes) copies, one per grid row (blockIdx.y)
//!  nccl_reduce_T ReduceArgs: out[i] = src_0[i] op src_1[i] op ... in source order (rank order)
//!  nccl_sync     SyncArgs: signal a set of peers, then wait for a set of peers (memory semaphores)
//! ```
//!
//! Element arithmetic ([`Elem`]): integers wrap; f32 and f64 are native; f16, bf16 and the two
//! fp8 formats are widened to f32, combined, and rounded back after every step (each step then
//! rounds exactly as the type's own arithmetic would: f32 holds the exact result of one
//! addition or product of two such values, so the single rounding is the type's). fp8 results
//! saturate to the largest finite value, as CUDA's `__NV_SATFINITE` conversions do.
#![no_std]

use mscclpp_device::abi::DeviceAbi;
use mscclpp_device::poll::SpinBudget;
use mscclpp_device::ptr::GlobalPtr;
use mscclpp_device::semaphore::MemoryDevice2DeviceSemaphore;

/// Copies one launch of `nccl_copy` carries.
pub const MAX_COPIES: usize = 16;

/// Peers a [`SyncArgs`] names by bit (4 words of 64 bits); larger worlds use [`SyncArgs::all`].
pub const MAX_SYNC_BITS: usize = 256;

/// One copy of `bytes` bytes (any alignment, the ranges must not overlap).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CopyItem {
    /// Destination address.
    pub dst: u64,
    /// Source address.
    pub src: u64,
    /// Bytes to copy.
    pub bytes: u64,
}

/// The argument of `nccl_copy`: `n` copies, row `blockIdx.y` of the grid doing copy `y`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CopyList {
    /// Copies in use (at most [`MAX_COPIES`]).
    pub n: u32,
    /// Padding (zero).
    pub pad: u32,
    /// The copies; entries from `n` on are ignored.
    pub items: [CopyItem; MAX_COPIES],
}
static_assertions::assert_eq_size!(CopyList, [u64; 1 + 3 * MAX_COPIES]);
// SAFETY: repr(C) of integers; identical on host and device, every bit pattern valid.
unsafe impl DeviceAbi for CopyList {}

impl Default for CopyList {
    fn default() -> Self {
        bytemuck::Zeroable::zeroed()
    }
}

/// The reductions, numbered as NCCL's `ncclRedOp_t` (0 to 4); [`ReduceOp::PreMulSum`] is a
/// sum of every input multiplied by a scalar first (NCCL's `ncclRedOpCreatePreMulSum`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// `a + b`.
    Sum = 0,
    /// `a * b`.
    Prod = 1,
    /// The larger.
    Max = 2,
    /// The smaller.
    Min = 3,
    /// The sum divided by the number of inputs (integers: truncating division).
    Avg = 4,
    /// `scalar * a + scalar * b + ...`.
    PreMulSum = 5,
}

impl ReduceOp {
    /// The operation of number `v` (as in [`ReduceArgs::op`]).
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Sum,
            1 => Self::Prod,
            2 => Self::Max,
            3 => Self::Min,
            4 => Self::Avg,
            5 => Self::PreMulSum,
            _ => return None,
        })
    }
}

/// Where a [`ReduceOp::PreMulSum`] finds its scalar.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    /// No scalar (every other operation).
    None = 0,
    /// [`ReduceArgs::scalar`] holds the value's bits (an f64 for floating types, an i64 or
    /// u64 for integers).
    Immediate = 1,
    /// [`ReduceArgs::scalar`] is the address of one element of the data type in device memory,
    /// read when the kernel runs.
    Device = 2,
}

/// The argument of `nccl_reduce_<type>`: `out[i] = src_0[i] op ... op src_{n-1}[i]` for `i` in
/// `0..count`, where `src_q = table[q] + offset + q * stride` (the table holds every rank's
/// scratch address). Elements need only their natural alignment.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ReduceArgs {
    /// Output address.
    pub out: u64,
    /// Address of `n_src` u64 source base addresses in device memory.
    pub table: u64,
    /// Bytes added to every source base.
    pub offset: u64,
    /// Bytes added per source index (0 when every source has the same layout).
    pub stride: u64,
    /// Elements.
    pub count: u64,
    /// The scalar of [`ReduceOp::PreMulSum`] (see [`ScalarKind`]).
    pub scalar: u64,
    /// Sources (at least 1).
    pub n_src: u32,
    /// [`ReduceOp`] as a number.
    pub op: u32,
    /// [`ScalarKind`] as a number.
    pub scalar_kind: u32,
    /// Padding (zero).
    pub pad: u32,
}
// SAFETY: repr(C) of integers.
unsafe impl DeviceAbi for ReduceArgs {}

/// The argument of `nccl_sync`: thread `t` signals peer `t` if bit `t` of `signal` is set (or
/// `all` is nonzero and `t` is not this rank), then waits for peer `t` likewise. The table holds
/// one memory semaphore per rank (this rank's entry unused). Each thread handles peers `t`,
/// `t + blockDim`, ...; launch one block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncArgs {
    /// Address of the semaphore table (`n_ranks` entries).
    pub table: GlobalPtr<MemoryDevice2DeviceSemaphore>,
    /// Ranks in the table.
    pub n_ranks: u32,
    /// This rank.
    pub rank: u32,
    /// Nonzero: signal and wait for every other rank (the bit sets are ignored).
    pub all: u32,
    /// Padding (zero).
    pub pad: u32,
    /// Peers to signal, by bit.
    pub signal: [u64; MAX_SYNC_BITS / 64],
    /// Peers to wait for, by bit.
    pub wait: [u64; MAX_SYNC_BITS / 64],
    /// How long a wait may last before the kernel traps with a message.
    pub budget: SpinBudget,
    /// Address of `n_ranks` u64 addresses, each rank's header word (0: no check).
    pub headers: u64,
    /// What this step is (operation, type, count, root; 0: no check): written to this rank's
    /// header before signalling and compared with every awaited peer's after its signal, so
    /// ranks that called different operations trap with a message instead of mixing data.
    pub tag: u64,
}
// SAFETY: repr(C) of a device address, integers and a SpinBudget (itself DeviceAbi).
unsafe impl DeviceAbi for SyncArgs {}

impl SyncArgs {
    /// Whether this launch signals peer `p`.
    #[inline(always)]
    pub fn signals(&self, p: u32) -> bool {
        if self.all != 0 {
            return p != self.rank && p < self.n_ranks;
        }
        (p as usize) < MAX_SYNC_BITS && self.signal[p as usize / 64] >> (p % 64) & 1 == 1
    }
    /// Whether this launch waits for peer `p`.
    #[inline(always)]
    pub fn waits(&self, p: u32) -> bool {
        if self.all != 0 {
            return p != self.rank && p < self.n_ranks;
        }
        (p as usize) < MAX_SYNC_BITS && self.wait[p as usize / 64] >> (p % 64) & 1 == 1
    }
}

/// An element type of NCCL, with the arithmetic of every reduction.
pub trait Elem: Copy {
    /// `a op b` for the binary operations (Sum, Prod, Max, Min; Avg and PreMulSum sum).
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
    /// `a * scalar`, the scalar given as in [`ScalarKind::Immediate`].
    fn scale(a: Self, scalar_bits: u64) -> Self;
    /// `a / n` (the average's last step).
    fn div(a: Self, n: u32) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => { $(
        impl Elem for $t {
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => if a > b { a } else { b },
                    ReduceOp::Min => if a < b { a } else { b },
                    _ => a.wrapping_add(b),
                }
            }
            #[inline(always)]
            fn scale(a: Self, scalar_bits: u64) -> Self {
                a.wrapping_mul(scalar_bits as $t)
            }
            #[inline(always)]
            fn div(a: Self, n: u32) -> Self {
                a / (n as $t)
            }
        }
    )* };
}
int_elem!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elem {
    ($($t:ty),*) => { $(
        impl Elem for $t {
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Prod => a * b,
                    // NaN-propagating, as NCCL's max and min of floating types.
                    ReduceOp::Max => if a != a || a > b { a } else { b },
                    ReduceOp::Min => if a != a || a < b { a } else { b },
                    _ => a + b,
                }
            }
            #[inline(always)]
            fn scale(a: Self, scalar_bits: u64) -> Self {
                a * (f64::from_bits(scalar_bits) as $t)
            }
            #[inline(always)]
            fn div(a: Self, n: u32) -> Self {
                a / (n as $t)
            }
        }
    )* };
}
float_elem!(f32, f64);

/// A narrow floating type stored as its bits and computed in f32.
pub trait Narrow: Copy {
    /// Widens to f32 (exact).
    fn widen(self) -> f32;
    /// Rounds an f32 to this type (nearest even; fp8 saturates to the largest finite value).
    fn narrow(v: f32) -> Self;
}

/// IEEE binary16.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F16(pub u16);
/// bfloat16.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Bf16(pub u16);
/// fp8 e4m3 (finite-only, as CUDA's `__nv_fp8_e4m3`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F8E4M3(pub u8);
/// fp8 e5m2 (as CUDA's `__nv_fp8_e5m2`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F8E5M2(pub u8);

impl Narrow for F16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        F16(half::f16::from_f32(v).to_bits())
    }
}
impl Narrow for Bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::bf16::from_bits(self.0).to_f32()
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        Bf16(half::bf16::from_f32(v).to_bits())
    }
}
impl Narrow for F8E4M3 {
    #[inline(always)]
    fn widen(self) -> f32 {
        float8::F8E4M3::from_bits(self.0).to_f32()
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        F8E4M3(float8::F8E4M3::from_f32(v).to_bits())
    }
}
impl Narrow for F8E5M2 {
    #[inline(always)]
    fn widen(self) -> f32 {
        float8::F8E5M2::from_bits(self.0).to_f32()
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        F8E5M2(float8::F8E5M2::from_f32(v).to_bits())
    }
}

macro_rules! narrow_elem {
    ($($t:ty),*) => { $(
        impl Elem for $t {
            #[inline(always)]
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                Self::narrow(f32::combine(op, a.widen(), b.widen()))
            }
            #[inline(always)]
            fn scale(a: Self, scalar_bits: u64) -> Self {
                Self::narrow(a.widen() * f64::from_bits(scalar_bits) as f32)
            }
            #[inline(always)]
            fn div(a: Self, n: u32) -> Self {
                Self::narrow(a.widen() / n as f32)
            }
        }
    )* };
}
narrow_elem!(F16, Bf16, F8E4M3, F8E5M2);

/// The tag of a collective step (see [`SyncArgs::tag`]): never 0, and different for different
/// operations, types, counts or roots (up to a 64-bit hash collision).
pub const fn step_tag(op: u32, dtype: u32, count: u64, root: u32) -> u64 {
    let mut x = (op as u64) | (dtype as u64) << 8 | (root as u64) << 16;
    x ^= count.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    if x == 0 { 1 } else { x }
}

/// Reduces `inputs` (in order) as the kernels do, for one element: the specification of
/// `nccl_reduce_<type>` that the host tests compare against.
pub fn reduce_one<T: Elem>(op: ReduceOp, inputs: &[T], scalar_bits: u64) -> T {
    let first = |x: T| if op == ReduceOp::PreMulSum { T::scale(x, scalar_bits) } else { x };
    let mut acc = first(inputs[0]);
    for &x in &inputs[1..] {
        acc = T::combine(op, acc, first(x));
    }
    if op == ReduceOp::Avg { T::div(acc, inputs.len() as u32) } else { acc }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_reductions_wrap_and_truncate() {
        assert_eq!(reduce_one(ReduceOp::Sum, &[i8::MAX, 1], 0), i8::MIN);
        assert_eq!(reduce_one(ReduceOp::Prod, &[16u8, 17], 0), 16);
        assert_eq!(reduce_one(ReduceOp::Avg, &[-7i32, 0], 0), -3);
        assert_eq!(reduce_one(ReduceOp::Max, &[3u64, u64::MAX, 9], 0), u64::MAX);
        assert_eq!(reduce_one(ReduceOp::Min, &[3i64, -5, 9], 0), -5);
        assert_eq!(reduce_one(ReduceOp::PreMulSum, &[3i32, 4], 2), 14);
    }

    #[test]
    fn narrow_types_round_once_per_step() {
        // 1 + 2^-11 is not a half: the sum rounds to 1 (ties to even), as half arithmetic does.
        let one = F16::narrow(1.0);
        let tiny = F16::narrow(2f32.powi(-11));
        assert_eq!(reduce_one(ReduceOp::Sum, &[one, tiny], 0), one);
        // fp8 e4m3 saturates: 448 + 448 is 448, not NaN.
        let max = F8E4M3::narrow(448.0);
        assert_eq!(reduce_one(ReduceOp::Sum, &[max, max], 0).widen(), 448.0);
        assert_eq!(F8E5M2::narrow(1e9).widen(), 57344.0);
        let b = reduce_one(ReduceOp::Avg, &[Bf16::narrow(1.0), Bf16::narrow(2.0)], 0);
        assert_eq!(b.widen(), 1.5);
        let p = reduce_one(ReduceOp::PreMulSum, &[F16::narrow(1.5), F16::narrow(2.5)], 0.5f64.to_bits());
        assert_eq!(p.widen(), 2.0);
    }

    #[test]
    fn float_max_and_min_propagate_nan() {
        assert!(reduce_one(ReduceOp::Max, &[f32::NAN, 1.0], 0).is_nan());
        assert!(reduce_one(ReduceOp::Min, &[1.0, f64::NAN], 0).is_nan());
    }

    #[test]
    fn step_tags_differ_by_every_field() {
        let t = step_tag(1, 7, 1000, 0);
        assert_ne!(t, 0);
        for other in
            [step_tag(2, 7, 1000, 0), step_tag(1, 8, 1000, 0), step_tag(1, 7, 1001, 0), step_tag(1, 7, 1000, 1)]
        {
            assert_ne!(t, other);
        }
    }

    #[test]
    fn sync_sets_select_peers() {
        let mut a = SyncArgs {
            table: GlobalPtr::null(),
            n_ranks: 300,
            rank: 1,
            all: 0,
            pad: 0,
            signal: [0; 4],
            wait: [0; 4],
            budget: SpinBudget::DEFAULT,
            headers: 0,
            tag: 0,
        };
        a.signal[1] = 1 << 3; // peer 67
        assert!(a.signals(67) && !a.signals(3) && !a.waits(67) && !a.signals(299));
        a.all = 1;
        assert!(a.signals(0) && !a.signals(1) && a.waits(299) && !a.waits(300));
    }
}
