//! Host references for tests and benchmarks: random inputs per rank and element type, and sums
//! in rank order computed on the CPU, independently of the device code.

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::DataType;

/// `count` random elements of `dtype` as bytes, the same for the same `(seed, rank)` on every
/// machine. Floats are finite values of either sign in [-4, 4); integers are any value.
pub fn random_input(dtype: DataType, count: usize, seed: u64, rank: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::with_capacity(count * dtype.bytes());
    for _ in 0..count {
        match dtype {
            DataType::F32 => out.extend_from_slice(&rng.random_range(-4.0f32..4.0).to_le_bytes()),
            DataType::F16 => out.extend_from_slice(&f16::from_f32(rng.random_range(-4.0f32..4.0)).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f32(rng.random_range(-4.0f32..4.0)).to_le_bytes()),
            DataType::I32 | DataType::U32 => out.extend_from_slice(&rng.random::<u32>().to_le_bytes()),
            DataType::F64 => out.extend_from_slice(&rng.random_range(-4.0f64..4.0).to_le_bytes()),
        }
    }
    out
}

/// `a + b` for one element of `dtype` (little-endian bytes), rounded once to the type.
fn add(dtype: DataType, a: &[u8], b: &[u8], out: &mut [u8]) {
    match dtype {
        DataType::F32 => {
            let s = f32::from_le_bytes(a.try_into().unwrap()) + f32::from_le_bytes(b.try_into().unwrap());
            out.copy_from_slice(&s.to_le_bytes());
        }
        DataType::F64 => {
            let s = f64::from_le_bytes(a.try_into().unwrap()) + f64::from_le_bytes(b.try_into().unwrap());
            out.copy_from_slice(&s.to_le_bytes());
        }
        DataType::F16 => {
            // f32 holds the exact sum of two f16 values to within one rounding that cannot
            // change the f16 result (24 >= 2 * 11 + 2 bits), so this is the rounded f16 sum.
            let s =
                f16::from_le_bytes(a.try_into().unwrap()).to_f32() + f16::from_le_bytes(b.try_into().unwrap()).to_f32();
            out.copy_from_slice(&f16::from_f32(s).to_le_bytes());
        }
        DataType::Bf16 => {
            let s = bf16::from_le_bytes(a.try_into().unwrap()).to_f32()
                + bf16::from_le_bytes(b.try_into().unwrap()).to_f32();
            out.copy_from_slice(&bf16::from_f32(s).to_le_bytes());
        }
        DataType::I32 | DataType::U32 => {
            let s = u32::from_le_bytes(a.try_into().unwrap()).wrapping_add(u32::from_le_bytes(b.try_into().unwrap()));
            out.copy_from_slice(&s.to_le_bytes());
        }
    }
}

/// Element-wise sum of equally long inputs, added in order (`inputs[0] + inputs[1] + ...`).
///
/// # Panics
/// If `inputs` is empty or the inputs differ in length (a test's own mistake).
pub fn sum_in_order(dtype: DataType, inputs: &[&[u8]]) -> Vec<u8> {
    let w = dtype.bytes();
    let mut acc = inputs[0].to_vec();
    let mut tmp = vec![0u8; w];
    for x in &inputs[1..] {
        assert_eq!(x.len(), acc.len(), "inputs of different lengths");
        for (a, b) in acc.chunks_exact_mut(w).zip(x.chunks_exact(w)) {
            add(dtype, a, b, &mut tmp);
            a.copy_from_slice(&tmp);
        }
    }
    acc
}

/// How many elements of `got` differ (bit for bit) from `want`.
pub fn count_wrong(dtype: DataType, got: &[u8], want: &[u8]) -> usize {
    got.chunks(dtype.bytes()).zip(want.chunks(dtype.bytes())).filter(|(a, b)| a != b).count()
        + got.len().abs_diff(want.len()) / dtype.bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_once_per_addition() {
        let one = f16::from_f32(1.0).to_le_bytes();
        let tie = f16::from_f32(2f32.powi(-11)).to_le_bytes();
        // 1 + 2^-11 is halfway between two f16 values: ties to even gives 1.0; adding the tiny
        // value twice in order therefore stays at 1.0, while adding 2^-10 at once would not.
        let s = sum_in_order(DataType::F16, &[&one, &tie, &tie]);
        assert_eq!(s, one.to_vec());
        let a = 1e8f32.to_le_bytes();
        let b = 1.0f32.to_le_bytes();
        let c = (-1e8f32).to_le_bytes();
        assert_eq!(sum_in_order(DataType::F32, &[&a, &b, &c]), 0f32.to_le_bytes().to_vec(), "order matters");
        assert_eq!(sum_in_order(DataType::F32, &[&a, &c, &b]), 1f32.to_le_bytes().to_vec());
        let m = u32::MAX.to_le_bytes();
        assert_eq!(sum_in_order(DataType::U32, &[&m, &2u32.to_le_bytes()]), 1u32.to_le_bytes().to_vec());
    }

    #[test]
    fn inputs_differ_by_rank_and_repeat_by_seed() {
        let a = random_input(DataType::Bf16, 100, 7, 0);
        assert_eq!(a, random_input(DataType::Bf16, 100, 7, 0));
        assert_ne!(a, random_input(DataType::Bf16, 100, 7, 1));
        assert_eq!(a.len(), 200);
        assert_eq!(count_wrong(DataType::Bf16, &a, &a), 0);
        let mut b = a.clone();
        b[5] ^= 1;
        assert_eq!(count_wrong(DataType::Bf16, &a, &b), 1);
    }
}
