//! Host references, computed on the CPU independently of the kernels: the dispatch layout (the
//! specification the layout kernel is tested against), what every rank receives, the tests'
//! expert layer, what combine returns, and random routings and batches.

pub mod decode;

use half::bf16;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::shared::{align_count, local_expert, rank_of_expert, valid_expert};
use crate::{DataType, ExpertIds, RecvFormat};

/// The dispatch layout of one rank's batch (DeepEP's `get_dispatch_layout` semantics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Tokens toward each rank (a token counts once per rank however many of its experts live
    /// there).
    pub tokens_per_rank: Vec<u32>,
    /// (token, slot) pairs toward each expert.
    pub tokens_per_expert: Vec<u32>,
    /// `[token * ranks + rank]`: whether the token goes to the rank.
    pub is_token_in_rank: Vec<bool>,
    /// `[token * ranks + rank]`: the token's position among this rank's tokens that go to the
    /// rank (an exclusive prefix sum of `is_token_in_rank` in token order), or -1.
    pub send_index: Vec<i32>,
}

/// The layout of `tokens x k` expert ids among `experts` experts split into equal contiguous
/// ranges over `ranks` ranks. Ids outside `0..experts` (-1 by convention) name no expert.
///
/// # Panics
/// If `ranks` is 0, `experts` is not a positive multiple of `ranks`, or `topk_idx` holds fewer
/// than `tokens * k` ids.
pub fn layout(topk_idx: &[i32], tokens: usize, k: usize, experts: usize, ranks: usize) -> Layout {
    assert!(ranks > 0 && experts >= ranks && experts.is_multiple_of(ranks), "{experts} experts over {ranks} ranks");
    assert!(topk_idx.len() >= tokens * k, "{} ids for {tokens} x {k}", topk_idx.len());
    let mut l = Layout {
        tokens_per_rank: vec![0; ranks],
        tokens_per_expert: vec![0; experts],
        is_token_in_rank: vec![false; tokens * ranks],
        send_index: vec![-1; tokens * ranks],
    };
    for t in 0..tokens {
        for &id in &topk_idx[t * k..(t + 1) * k] {
            if valid_expert(id, experts as u32) {
                l.tokens_per_expert[id as usize] += 1;
                let r = rank_of_expert(id as u32, experts as u32, ranks as u32) as usize;
                l.is_token_in_rank[t * ranks + r] = true;
            }
        }
        for r in 0..ranks {
            if l.is_token_in_rank[t * ranks + r] {
                l.send_index[t * ranks + r] = l.tokens_per_rank[r] as i32;
                l.tokens_per_rank[r] += 1;
            }
        }
    }
    l
}

/// How the tests route tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Routing {
    /// `k` distinct experts per token, uniformly; each slot is -1 with probability `none`, and a
    /// token has no expert at all with probability `none / 2`.
    Random {
        /// Probability of an empty slot.
        none: f64,
    },
    /// Every slot picks an expert of this rank (distinct while the rank has enough experts).
    ToRank(usize),
}

/// `tokens x k` expert ids routed as `routing` says.
///
/// # Panics
/// If `ranks` is 0, or the experts to pick from (all of them, or those of the rank of
/// [`Routing::ToRank`]) are none.
pub fn random_topk(
    rng: &mut StdRng,
    tokens: usize,
    k: usize,
    experts: usize,
    ranks: usize,
    routing: Routing,
) -> Vec<i32> {
    let epr = experts / ranks;
    let mut out = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let (lo, count, none) = match routing {
            Routing::Random { none } => (0, experts, none),
            Routing::ToRank(r) => (r * epr, epr, 0.0),
        };
        let nothing = none > 0.0 && rng.random_bool(none / 2.0);
        let mut picked: Vec<i32> = Vec::with_capacity(k);
        for _ in 0..k {
            let id = loop {
                let id = (lo + rng.random_range(0..count)) as i32;
                if picked.len() >= count || !picked.contains(&id) {
                    break id;
                }
            };
            picked.push(id);
        }
        for id in picked {
            out.push(if nothing || (none > 0.0 && rng.random_bool(none)) { -1 } else { id });
        }
    }
    out
}

/// `ids` (expert ids or -1) as i64, as a DeepEP user gives them, with every -1 replaced by one
/// of several values that name no expert, some of which an i32 truncation would read as an
/// expert (`1 << 32` as 0, `i64::MIN` as 0, `(1 << 32) + 1` as 1) or as -1 (`i64::MAX`).
pub fn widen_ids(ids: &[i32]) -> Vec<i64> {
    const NONE: [i64; 6] = [-1, 1 << 32, (1 << 32) + 1, i64::MIN, i64::MAX, -(1 << 40)];
    ids.iter().enumerate().map(|(i, &id)| if id == -1 { NONE[i % NONE.len()] } else { id as i64 }).collect()
}

/// One rank's batch, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct RankInput {
    /// Tokens.
    pub tokens: usize,
    /// Experts per token.
    pub k: usize,
    /// `tokens` rows of `hidden` elements (little-endian bytes of the element type).
    pub x: Vec<u8>,
    /// `tokens x k` expert ids.
    pub topk_idx: Vec<i32>,
    /// `tokens x k` weights.
    pub topk_weights: Vec<f32>,
}

/// A random batch of rank `rank` for `seed`: the same on every machine, so every rank can
/// compute every other rank's batch. Elements are finite values in [-4, 4), weights in [0, 1).
#[allow(clippy::too_many_arguments)]
pub fn random_input(
    seed: u64,
    rank: usize,
    dtype: DataType,
    tokens: usize,
    hidden: usize,
    k: usize,
    (experts, ranks): (usize, usize),
    routing: Routing,
) -> RankInput {
    let mut rng = StdRng::seed_from_u64(seed ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let values: Vec<f32> = (0..tokens * hidden).map(|_| rng.random_range(-4.0f32..4.0)).collect();
    let x = from_f32(dtype, &values);
    let topk_idx = random_topk(&mut rng, tokens, k, experts, ranks, routing);
    let topk_weights = (0..tokens * k).map(|_| rng.random_range(0.0f32..1.0)).collect();
    RankInput { tokens, k, x, topk_idx, topk_weights }
}

/// Elements of `dtype` (bf16 or f32) as f32.
///
/// # Panics
/// For other element types.
pub fn to_f32(dtype: DataType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DataType::Bf16 => bytes.as_chunks::<2>().0.iter().map(|c| bf16::from_le_bytes(*c).to_f32()).collect(),
        DataType::F32 => bytes.as_chunks::<4>().0.iter().map(|c| f32::from_le_bytes(*c)).collect(),
        other => panic!("ep reference: element type {}", other.name()),
    }
}

/// f32 values as elements of `dtype` (rounded to nearest even for bf16, as the kernels do).
///
/// # Panics
/// For other element types.
pub fn from_f32(dtype: DataType, v: &[f32]) -> Vec<u8> {
    match dtype {
        DataType::Bf16 => v.iter().flat_map(|x| bf16::from_f32(*x).to_le_bytes()).collect(),
        DataType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        other => panic!("ep reference: element type {}", other.name()),
    }
}

/// bf16 rows (`hidden` elements each, a multiple of 128) as an FP8 dispatch delivers them
/// (`format` [`RecvFormat::E4m3`], [`RecvFormat::E4m3Pow2`] or [`RecvFormat::E4m3Ue8m0`]): the
/// e4m3 bytes and the `[rows][hidden / 128]` scales (as f32; [`pack_ue8m0`] packs them as UE8M0
/// delivers them). DeepEP's per-token cast in its dispatch kernel
/// (`calculate_fp8_scales` and `__nv_cvt_float2_to_fp8x2(.., __NV_SATFINITE, __NV_E4M3)`): per
/// 128 columns, `amax = max(1e-4, max |x|)` in f32; the scale `amax * (1 / 448)` and the
/// multiplier `448 / amax` (or, rounding the scale up to a power of two, `2^e` and `2^-e` with
/// `e = ceil(log2(amax * (1 / 448)))`); every element `x * multiplier` (f32) rounded to the
/// nearest e4m3, ties to even, saturated to +-448 (the `float8` crate's conversion, written after
/// CUDA's own).
///
/// # Panics
/// If `format` is not FP8, or `hidden` is not a multiple of 128.
pub fn cast_e4m3(x: &[u8], hidden: usize, format: RecvFormat) -> (Vec<u8>, Vec<f32>) {
    assert!(format.is_fp8() && hidden.is_multiple_of(128), "{format:?} of {hidden} columns");
    let v = to_f32(DataType::Bf16, x);
    let mut q = Vec::with_capacity(v.len());
    let mut scales = Vec::with_capacity(v.len() / 128);
    for group in v.chunks(128) {
        let amax = group.iter().fold(1e-4f32, |m, x| m.max(x.abs()));
        let inv = amax * (1.0 / 448.0);
        let (mul, scale) = if format != RecvFormat::E4m3 {
            let e = (inv as f64).log2().ceil() as i32;
            (2f32.powi(-e), 2f32.powi(e))
        } else {
            (448.0 / amax, inv)
        };
        q.extend(group.iter().map(|x| float8::F8E4M3::from_f32(x * mul).to_bits()));
        scales.push(scale);
    }
    (q, scales)
}

/// bf16 rows (`hidden` elements each) with their 128-column groups rescaled so that an FP8 cast
/// meets every case: by group, in turn, all zeros, scaled by 1e-5, as they are, one element
/// 1e4 times larger (the others become e4m3 subnormals or zeros), scaled by 1e30.
pub fn spread_magnitudes(x: &[u8], hidden: usize) -> Vec<u8> {
    let mut v = to_f32(DataType::Bf16, x);
    for (i, e) in v.iter_mut().enumerate() {
        let (row, col) = (i / hidden, i % hidden);
        *e *= match (row * 7 + col / 128) % 5 {
            0 => 0.0,
            1 => 1e-5,
            3 if col % 128 == 5 => 1e4,
            4 => 1e30,
            _ => 1.0,
        };
    }
    from_f32(DataType::Bf16, &v)
}

/// Power-of-two scales (`[rows][groups]` f32) as [`RecvFormat::E4m3Ue8m0`] delivers them: the
/// exponent field of each as a byte, four to a little-endian u32, every row padded with zero
/// bytes to whole words.
pub fn pack_ue8m0(scales: &[f32], groups: usize) -> Vec<u32> {
    let words = groups.div_ceil(4);
    let mut out = vec![0u32; scales.len() / groups.max(1) * words];
    for (i, s) in scales.iter().enumerate() {
        let (row, g) = (i / groups, i % groups);
        assert_eq!(s.to_bits() & 0x807f_ffff, 0, "{s} is not a power of two");
        out[row * words + g / 4] |= (s.to_bits() >> 23) << (8 * (g % 4));
    }
    out
}

/// e4m3 bytes and their `[rows][hidden / 128]` scales back to f32 (`e4m3 * scale`).
pub fn e4m3_to_f32(q: &[u8], scales: &[f32], hidden: usize) -> Vec<f32> {
    let scale = |i: usize| scales[i / hidden * (hidden / 128) + i % hidden / 128];
    q.iter().enumerate().map(|(i, &b)| float8::F8E4M3::from_bits(b).to_f32() * scale(i)).collect()
}

/// What one rank receives in a dispatch.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    /// Rows.
    pub rows: usize,
    /// `n + 1` offsets of the source ranks' rows.
    pub offsets: Vec<usize>,
    /// `[source * n + destination]` token counts.
    pub matrix: Vec<u32>,
    /// (token, slot) pairs toward each expert of the rank, rounded up to a multiple of the
    /// expert alignment.
    pub per_expert: Vec<u32>,
    /// The rows (bytes).
    pub x: Vec<u8>,
    /// Their ids: local (`id - d * experts_per_rank` for an expert of `d`, else -1) or global.
    pub topk_idx: Vec<i32>,
    /// Their weights (with local ids, 0 where the id is -1).
    pub topk_weights: Vec<f32>,
    /// Their source token indices.
    pub src: Vec<i32>,
}

/// What rank `d` receives when every rank dispatches its `inputs[s]` (with `layouts[s]`, its
/// layout), rows of `row_bytes` bytes, its ids as `ids` says, its counts per local expert
/// rounded up to a multiple of `alignment` (DeepEP's `expert_alignment`, 1 or more).
pub fn received(
    inputs: &[RankInput],
    layouts: &[Layout],
    d: usize,
    (experts, row_bytes): (usize, usize),
    ids: ExpertIds,
    alignment: u32,
) -> Received {
    let n = inputs.len();
    let epr = experts / n;
    let matrix: Vec<u32> = (0..n * n).map(|i| layouts[i / n].tokens_per_rank[i % n]).collect();
    let mut offsets = vec![0usize; n + 1];
    for s in 0..n {
        offsets[s + 1] = offsets[s] + matrix[s * n + d] as usize;
    }
    let per_expert = (0..epr)
        .map(|j| align_count(layouts.iter().map(|l| l.tokens_per_expert[d * epr + j]).sum(), alignment))
        .collect();
    let mut r = Received {
        rows: offsets[n],
        offsets,
        matrix,
        per_expert,
        x: vec![],
        topk_idx: vec![],
        topk_weights: vec![],
        src: vec![],
    };
    for (inp, l) in inputs.iter().zip(layouts) {
        for t in 0..inp.tokens {
            if l.is_token_in_rank[t * n + d] {
                r.x.extend_from_slice(&inp.x[t * row_bytes..(t + 1) * row_bytes]);
                for j in t * inp.k..(t + 1) * inp.k {
                    let (id, w) = (inp.topk_idx[j], inp.topk_weights[j]);
                    match ids {
                        ExpertIds::Global => {
                            r.topk_idx.push(id);
                            r.topk_weights.push(w);
                        }
                        ExpertIds::Local => {
                            let local = local_expert(id, d as u32, experts as u32, n as u32);
                            r.topk_idx.push(local);
                            r.topk_weights.push(if local < 0 { 0.0 } else { w });
                        }
                    }
                }
                r.src.push(t as i32);
            }
        }
    }
    r
}

/// The tests' expert layer on rank `rank`: (global) expert `e` multiplies by `e + 1`. For every
/// received row, the sum over its slots whose expert lives on `rank`, in slot order, of
/// `(weight * (e + 1)) * x` in f32 (each product and sum rounded), rounded to `dtype`. `ids`
/// says how to read the received ids (a local id `l` is the expert `rank * experts_per_rank +
/// l`); the result is the same for both.
pub fn scaled_experts(
    dtype: DataType,
    recv: &Received,
    k: usize,
    (rank, ranks): (usize, usize),
    experts: usize,
    ids: ExpertIds,
) -> Vec<u8> {
    let x = to_f32(dtype, &recv.x);
    let hidden = x.len().checked_div(recv.rows).unwrap_or(0);
    let mut y = vec![0f32; x.len()];
    for i in 0..recv.rows {
        for j in 0..k {
            let id = match recv.topk_idx[i * k + j] {
                l if ids == ExpertIds::Local && (0..(experts / ranks) as i32).contains(&l) => {
                    l + (rank * (experts / ranks)) as i32
                }
                _ if ids == ExpertIds::Local => -1,
                g => g,
            };
            if valid_expert(id, experts as u32)
                && rank_of_expert(id as u32, experts as u32, ranks as u32) as usize == rank
            {
                let s = recv.topk_weights[i * k + j] * (id + 1) as f32;
                for h in 0..hidden {
                    y[i * hidden + h] += s * x[i * hidden + h];
                }
            }
        }
    }
    from_f32(dtype, &y)
}

/// What combine returns on rank `s` (its `layout`, `tokens` tokens): for every token, the rows
/// the ranks it went to computed (`outputs[r]`, the rows of rank `r` in its received order,
/// `offsets[r]` its offsets by source), summed in rank order in f32 from 0, rounded to `dtype`.
pub fn combine(
    dtype: DataType,
    layout: &Layout,
    s: usize,
    tokens: usize,
    (outputs, offsets): (&[Vec<u8>], &[Vec<usize>]),
    row_bytes: usize,
) -> Vec<u8> {
    combine_with_bias(dtype, layout, (s, tokens), (outputs, offsets), row_bytes, &[])
}

/// [`combine`] with bias rows (`tokens` rows of `dtype` each, DeepEP's `combine(bias=...)`): every
/// token's f32 sum starts at `0 + bias[0][t] + bias[1][t]`, in that order, then adds the ranks'
/// rows in rank order; rounded once to `dtype`.
pub fn combine_with_bias(
    dtype: DataType,
    layout: &Layout,
    (s, tokens): (usize, usize),
    (outputs, offsets): (&[Vec<u8>], &[Vec<usize>]),
    row_bytes: usize,
    bias: &[&[u8]],
) -> Vec<u8> {
    let n = outputs.len();
    let hidden = row_bytes / dtype.bytes();
    let mut acc = vec![0f32; tokens * hidden];
    for b in bias {
        for (a, v) in acc.iter_mut().zip(to_f32(dtype, &b[..tokens * row_bytes])) {
            *a += v;
        }
    }
    for t in 0..tokens {
        for r in 0..n {
            let si = layout.send_index[t * n + r];
            if si >= 0 {
                let row = offsets[r][s] + si as usize;
                let v = to_f32(dtype, &outputs[r][row * row_bytes..(row + 1) * row_bytes]);
                for h in 0..hidden {
                    acc[t * hidden + h] += v[h];
                }
            }
        }
    }
    from_f32(dtype, &acc)
}

/// What a combine that sums the top-k weights returns on rank `s` (its `layout`, `tokens` tokens
/// of `k` slots): for every token and slot, the weights the ranks it went to return
/// (`weights[r]`, `rows x k` of rank `r` in its received order, `offsets[r]` its offsets by
/// source), summed in rank order in f32 from 0.
pub fn combine_weights(
    layout: &Layout,
    s: usize,
    (tokens, k): (usize, usize),
    (weights, offsets): (&[Vec<f32>], &[Vec<usize>]),
) -> Vec<f32> {
    let n = weights.len();
    let mut acc = vec![0f32; tokens * k];
    for t in 0..tokens {
        for r in 0..n {
            let si = layout.send_index[t * n + r];
            if si >= 0 {
                let row = offsets[r][s] + si as usize;
                for j in 0..k {
                    acc[t * k + j] += weights[r][row * k + j];
                }
            }
        }
    }
    acc
}

/// The mixture the tests' experts compute for rank input `inp`, exactly (f64):
/// `sum_j w_j * (e_j + 1) * x` over the token's valid slots; and the sum of the terms' magnitudes
/// (for a rounding bound).
pub fn moe_exact(dtype: DataType, inp: &RankInput, experts: usize) -> (Vec<f64>, Vec<f64>) {
    let x = to_f32(dtype, &inp.x);
    let hidden = x.len().checked_div(inp.tokens).unwrap_or(0);
    let mut sum = vec![0f64; x.len()];
    let mut mag = vec![0f64; x.len()];
    for t in 0..inp.tokens {
        for j in 0..inp.k {
            let id = inp.topk_idx[t * inp.k + j];
            if valid_expert(id, experts as u32) {
                let s = inp.topk_weights[t * inp.k + j] as f64 * (id + 1) as f64;
                for h in 0..hidden {
                    let v = s * x[t * hidden + h] as f64;
                    sum[t * hidden + h] += v;
                    mag[t * hidden + h] += v.abs();
                }
            }
        }
    }
    (sum, mag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hand_case_two_ranks() {
        // 4 experts on 2 ranks (0, 1 on rank 0; 2, 3 on rank 1), k = 2.
        let idx = [0, 1, 2, -1, 1, 3, -1, -1];
        let l = layout(&idx, 4, 2, 4, 2);
        assert_eq!(l.tokens_per_rank, [2, 2]);
        assert_eq!(l.tokens_per_expert, [1, 2, 1, 1]);
        assert_eq!(l.is_token_in_rank, [true, false, false, true, true, true, false, false]);
        assert_eq!(l.send_index, [0, -1, -1, 0, 1, 1, -1, -1]);
    }

    #[test]
    fn ids_outside_the_experts_name_none_and_duplicates_count_per_slot() {
        // 8 experts on 4 ranks; k = 3.
        let idx = [8, -7, 3, 1, 1, -1, 100, i32::MIN, i32::MAX];
        let l = layout(&idx, 3, 3, 8, 4);
        assert_eq!(l.tokens_per_rank, [1, 1, 0, 0]);
        assert_eq!(l.tokens_per_expert, [0, 2, 0, 1, 0, 0, 0, 0]);
        assert_eq!(l.send_index, [-1, 0, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1]);
    }

    #[test]
    fn empty_batches_and_one_rank() {
        let l = layout(&[], 0, 8, 16, 8);
        assert_eq!(l.tokens_per_rank, [0; 8]);
        assert_eq!(l.tokens_per_expert, [0; 16]);
        assert!(l.send_index.is_empty());
        let l = layout(&[2, 0, -1, -1, 1, 1], 3, 2, 3, 1);
        assert_eq!(l.tokens_per_rank, [2]);
        assert_eq!(l.send_index, [0, -1, 1]);
        assert_eq!(l.tokens_per_expert, [1, 2, 1]);
    }

    #[test]
    fn routings_do_what_they_say() {
        let mut rng = StdRng::seed_from_u64(5);
        let ids = random_topk(&mut rng, 500, 8, 64, 4, Routing::ToRank(2));
        assert!(ids.iter().all(|&e| (32..48).contains(&e)));
        for t in ids.chunks(8) {
            let mut s = t.to_vec();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 8, "distinct experts: {t:?}");
        }
        let ids = random_topk(&mut rng, 2000, 4, 64, 4, Routing::Random { none: 0.2 });
        let empty_slots = ids.iter().filter(|&&e| e == -1).count();
        let empty_tokens = ids.chunks(4).filter(|t| t.iter().all(|&e| e == -1)).count();
        assert!(empty_slots > 1000 && empty_slots < 3000, "{empty_slots}");
        assert!(empty_tokens > 100, "{empty_tokens}");
        // More slots than a rank has experts: repeats are allowed.
        let ids = random_topk(&mut rng, 10, 4, 8, 4, Routing::ToRank(0));
        assert!(ids.iter().all(|&e| (0..2).contains(&e)));
    }

    #[test]
    fn receive_expectations_group_by_source_rank() {
        let (experts, n, hidden) = (8, 2, 8);
        let inputs: Vec<RankInput> = (0..n)
            .map(|r| {
                random_input(9, r, DataType::Bf16, 20 + r * 5, hidden, 3, (experts, n), Routing::Random { none: 0.1 })
            })
            .collect();
        let layouts: Vec<Layout> = inputs.iter().map(|i| layout(&i.topk_idx, i.tokens, i.k, experts, n)).collect();
        let row = hidden * 2;
        for d in 0..n {
            let r = received(&inputs, &layouts, d, (experts, row), ExpertIds::Global, 1);
            assert_eq!(r.rows, layouts.iter().map(|l| l.tokens_per_rank[d] as usize).sum::<usize>());
            assert_eq!(r.x.len(), r.rows * row);
            assert_eq!(r.offsets[1], layouts[0].tokens_per_rank[d] as usize);
            // Rows of one source are in token order.
            for s in 0..n {
                let src = &r.src[r.offsets[s]..r.offsets[s + 1]];
                assert!(src.windows(2).all(|w| w[0] < w[1]), "{src:?}");
            }
            assert_eq!(r.per_expert.iter().sum::<u32>(), {
                let e = experts / n;
                layouts.iter().map(|l| l.tokens_per_expert[d * e..(d + 1) * e].iter().sum::<u32>()).sum::<u32>()
            });
        }
    }

    #[test]
    fn local_ids_zeroed_weights_and_aligned_counts_by_hand() {
        // 4 experts on 2 ranks (0, 1 on rank 0; 2, 3 on rank 1), k = 2, rows of 2 bytes.
        let input = |tokens, topk_idx: Vec<i32>, topk_weights: Vec<f32>| RankInput {
            tokens,
            k: 2,
            x: (0..tokens as u8 * 2).collect(),
            topk_idx,
            topk_weights,
        };
        let inputs = [input(2, vec![0, 3, 2, -1], vec![0.5, 0.25, 0.75, 0.125]), input(1, vec![1, 0], vec![1.0, 2.0])];
        let layouts: Vec<Layout> = inputs.iter().map(|i| layout(&i.topk_idx, i.tokens, 2, 4, 2)).collect();
        let r0 = received(&inputs, &layouts, 0, (4, 2), ExpertIds::Local, 1);
        assert_eq!(r0.src, [0, 0]);
        assert_eq!(r0.topk_idx, [0, -1, 1, 0]);
        assert_eq!(r0.topk_weights, [0.5, 0.0, 1.0, 2.0]);
        assert_eq!(r0.per_expert, [2, 1]);
        let r1 = received(&inputs, &layouts, 1, (4, 2), ExpertIds::Local, 4);
        assert_eq!(r1.src, [0, 1]);
        assert_eq!(r1.topk_idx, [-1, 1, 0, -1]);
        assert_eq!(r1.topk_weights, [0.0, 0.25, 0.75, 0.0]);
        assert_eq!(r1.per_expert, [4, 4], "1 and 1 rounded up to 4");
        assert_eq!(received(&inputs, &layouts, 1, (4, 2), ExpertIds::Local, 1).per_expert, [1, 1]);
        let g0 = received(&inputs, &layouts, 0, (4, 2), ExpertIds::Global, 3);
        assert_eq!(g0.topk_idx, [0, 3, 1, 0]);
        assert_eq!(g0.topk_weights, [0.5, 0.25, 1.0, 2.0]);
        assert_eq!(g0.per_expert, [3, 3]);
        assert_eq!((g0.x, g0.rows), (r0.x, r0.rows), "only the ids, weights and counts differ");
    }

    #[test]
    fn combine_of_the_scaled_experts_is_the_mixture() {
        let (experts, n, hidden, k) = (16, 4, 16, 4);
        for dtype in [DataType::Bf16, DataType::F32] {
            let inputs: Vec<RankInput> = (0..n)
                .map(|r| random_input(3, r, dtype, 30, hidden, k, (experts, n), Routing::Random { none: 0.1 }))
                .collect();
            let layouts: Vec<Layout> = inputs.iter().map(|i| layout(&i.topk_idx, i.tokens, k, experts, n)).collect();
            let row = hidden * dtype.bytes();
            let recv: Vec<Received> =
                (0..n).map(|d| received(&inputs, &layouts, d, (experts, row), ExpertIds::Local, 1)).collect();
            let ys: Vec<Vec<u8>> =
                (0..n).map(|d| scaled_experts(dtype, &recv[d], k, (d, n), experts, ExpertIds::Local)).collect();
            for (d, y) in ys.iter().enumerate() {
                let global = received(&inputs, &layouts, d, (experts, row), ExpertIds::Global, 1);
                let yg = scaled_experts(dtype, &global, k, (d, n), experts, ExpertIds::Global);
                assert!(yg == *y, "the experts compute the same from local and global ids");
            }
            let offs: Vec<Vec<usize>> = recv.iter().map(|r| r.offsets.clone()).collect();
            // The delivered weights summed back: every slot's weight (0 for no expert).
            let ws: Vec<Vec<f32>> = recv.iter().map(|r| r.topk_weights.clone()).collect();
            for s in 0..n {
                let back = combine_weights(&layouts[s], s, (30, k), (&ws, &offs));
                let want: Vec<f32> = inputs[s]
                    .topk_idx
                    .iter()
                    .zip(&inputs[s].topk_weights)
                    .map(|(&id, &w)| if valid_expert(id, experts as u32) { w } else { 0.0 })
                    .collect();
                assert_eq!(back, want);
            }
            for s in 0..n {
                let out = to_f32(dtype, &combine(dtype, &layouts[s], s, 30, (&ys, &offs), row));
                let (want, mag) = moe_exact(dtype, &inputs[s], experts);
                let eps = if dtype == DataType::Bf16 { 3.0 / 256.0 } else { 1e-5 };
                for i in 0..out.len() {
                    assert!((out[i] as f64 - want[i]).abs() <= eps * mag[i] + 1e-30, "{dtype:?} {i}");
                }
            }
        }
    }

    #[test]
    fn e4m3_of_the_kernels_is_the_reference_conversion() {
        use crate::shared::e4m3_from_f32;
        // Every e4m3 value, the midpoints between neighbours and the f32 values next to them
        // (ties to even, saturation at 464 and above, the subnormals), both signs; then a sweep
        // of f32 bit patterns.
        let values: Vec<f32> = (0u8..0x7f).map(|b| float8::F8E4M3::from_bits(b).to_f32()).collect();
        let mut xs = vec![0.0, 2f32.powi(-10), 464.0, 480.0, 1e30, f32::INFINITY, f32::MIN_POSITIVE, 1e-45];
        for w in values.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            for x in [w[0], mid, w[1]] {
                xs.extend([x, f32::from_bits(x.to_bits() + 1), f32::from_bits(x.to_bits().max(1) - 1)]);
            }
        }
        xs.extend((0..1u64 << 32).step_by(4099).map(|b| f32::from_bits(b as u32)).filter(|x| !x.is_nan()));
        for x in xs.iter().flat_map(|&x| [x, -x]) {
            assert_eq!(e4m3_from_f32(x), float8::F8E4M3::from_f32(x).to_bits(), "{x:e} ({:#x})", x.to_bits());
        }
        assert_eq!(e4m3_from_f32(f32::NAN) & 0x7f, 0x7f);
        assert_eq!([e4m3_from_f32(448.0), e4m3_from_f32(-1e9), e4m3_from_f32(2f32.powi(-9))], [0x7e, 0xfe, 0x01]);
    }

    #[test]
    fn fp8_cast_by_hand_and_back() {
        use crate::shared::e4m3_scales;
        // One row of 256 columns: a group of zeros, a group whose largest magnitude is 3.5.
        let mut v = vec![0f32; 256];
        v[128] = -3.5;
        v[200] = 1.0;
        v[255] = 0.001;
        let x = from_f32(DataType::Bf16, &v);
        let (q, s) = cast_e4m3(&x, 256, RecvFormat::E4m3);
        assert_eq!(s, [1e-4f32 * (1.0 / 448.0), 3.5f32 * (1.0 / 448.0)]);
        assert!(q[..128].iter().all(|&b| b == 0), "zeros stay zeros");
        assert_eq!((q[128], q[200]), (0xfe, float8::F8E4M3::from_f32(448.0 / 3.5).to_bits()), "-amax is -448");
        let (qp, sp) = cast_e4m3(&x, 256, RecvFormat::E4m3Pow2);
        assert_eq!(sp, [2f32.powi(-22), 2f32.powi(-7)], "1e-4 / 448 <= 2^-22, 3.5 / 448 = 2^-7");
        assert_eq!((qp[128], qp[200]), (0xfe, 0x70), "-448, 128");
        // The kernels' scales are the reference's (amax of bf16 values, at least 1e-4).
        for (amax, pow2) in [(0.0, false), (0.0, true), (3.5, false), (3.5, true), (300.0, true), (0.7, false)] {
            let a = bf16::from_f32(amax).to_f32();
            let (mul, scale) = e4m3_scales(a.max(1e-4), pow2);
            let format = if pow2 { RecvFormat::E4m3Pow2 } else { RecvFormat::E4m3 };
            let (q, want) = cast_e4m3(&from_f32(DataType::Bf16, &[a; 128]), 128, format);
            assert_eq!(scale, want[0], "{amax} {pow2}");
            assert_eq!(q[0], float8::F8E4M3::from_f32(a * mul).to_bits(), "{amax} {pow2}");
        }
        // Back within e4m3's rounding: half an ulp (2^-4 relative) or half the smallest
        // subnormal step (2^-10 * scale * 448 / 448) of the group.
        let mut rng = StdRng::seed_from_u64(3);
        let v: Vec<f32> =
            (0..4 * 384).map(|_| rng.random_range(-4.0f32..4.0) * [1.0, 1e-3][rng.random_range(0..2)]).collect();
        let x = from_f32(DataType::Bf16, &v);
        assert_eq!(pack_ue8m0(&[1.0, 0.5, 2.0, 4.0, 2f32.powi(-22)], 5), [0x8180_7e7f, 0x69]);
        assert_eq!(pack_ue8m0(&[1.0, 0.5, 2.0, 4.0, 2f32.powi(-22), 8.0], 3), [0x0080_7e7f, 0x0082_6981]);
        assert_eq!(cast_e4m3(&x, 384, RecvFormat::E4m3Ue8m0), cast_e4m3(&x, 384, RecvFormat::E4m3Pow2));
        for format in [RecvFormat::E4m3, RecvFormat::E4m3Pow2] {
            let (q, s) = cast_e4m3(&x, 384, format);
            assert_eq!((q.len(), s.len()), (4 * 384, 4 * 3));
            let back = e4m3_to_f32(&q, &s, 384);
            let orig = to_f32(DataType::Bf16, &x);
            for i in 0..orig.len() {
                let scale = s[i / 128];
                let err = (back[i] - orig[i]).abs();
                assert!(
                    err <= orig[i].abs() / 16.0 + scale / 512.0 + 1e-12,
                    "{format:?} {i}: {} vs {}",
                    back[i],
                    orig[i]
                );
            }
        }
    }

    proptest! {
        /// The layout against its definition, restated: counts, positions as prefix sums in token
        /// order, and a rank computed as floor(e * ranks / experts).
        #[test]
        fn layout_is_a_prefix_sum_of_membership(
            ranks in 1usize..=8,
            epr in 1usize..=8,
            k in 1usize..=8,
            tokens in 0usize..150,
            seed in any::<u64>(),
        ) {
            let experts = ranks * epr;
            let mut rng = StdRng::seed_from_u64(seed);
            let idx: Vec<i32> = (0..tokens * k).map(|_| rng.random_range(-2..experts as i32 + 2)).collect();
            let l = layout(&idx, tokens, k, experts, ranks);
            for r in 0..ranks {
                let mut next = 0;
                for t in 0..tokens {
                    let member = idx[t * k..(t + 1) * k]
                        .iter()
                        .any(|&e| e >= 0 && (e as usize) < experts && e as usize * ranks / experts == r);
                    prop_assert_eq!(l.is_token_in_rank[t * ranks + r], member);
                    if member {
                        prop_assert_eq!(l.send_index[t * ranks + r], next);
                        next += 1;
                    } else {
                        prop_assert_eq!(l.send_index[t * ranks + r], -1);
                    }
                }
                prop_assert_eq!(l.tokens_per_rank[r], next as u32);
            }
            for (e, &count) in l.tokens_per_expert.iter().enumerate() {
                let c = idx[..tokens * k].iter().filter(|&&x| x == e as i32).count();
                prop_assert_eq!(count as usize, c);
            }
            prop_assert_eq!(l.tokens_per_expert.len(), experts);
        }
    }
}
