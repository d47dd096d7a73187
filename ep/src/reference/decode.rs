//! The decode (low-latency) mode's specification, DeepEP's `low_latency_dispatch` and
//! `low_latency_combine` with a fixed order where DeepEP's depends on its atomics:
//!
//! * [`received`]: what rank `d` receives. For each local expert `j` (global expert `g = d *
//!   experts_per_rank + j`): one row per token of any rank one of whose slots names `g` (once,
//!   however many of its slots do), by source rank, then in the source's token order:
//!   `x[j]` the rows (DeepEP's `packed_recv_x[j][..count[j]]`), `count[j]` their number
//!   (`packed_recv_count`), `src[j]` each row's token index on its source
//!   (`packed_recv_src_info`), and `range[j * ranks + s]` = `(begin << 32) | count` of source
//!   `s`'s rows among them (`packed_recv_layout_range`: the count in the low half).
//! * [`scaled_experts`]: the tests' experts (expert `g` multiplies by `g + 1`).
//! * [`combine`]: what rank `s` gets back: for every token `t`, `sum over its slots j in slot
//!   order of weight[t][j] * output(t, j)`, where `output(t, j)` is the row the expert of slot
//!   `j` computed for `t` (found through `range` and `src`, as a user of DeepEP's handle would);
//!   each product and each sum rounded to f32, from 0, then rounded once to the element type;
//!   slots naming no expert add nothing (a token with none gets zeros).

use crate::DataType;
use crate::reference::{RankInput, from_f32, to_f32};
use crate::shared::{rank_of_expert, valid_expert};

/// What one rank receives in a decode dispatch (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    /// Per local expert: its rows (bytes).
    pub x: Vec<Vec<u8>>,
    /// Rows per local expert.
    pub count: Vec<u32>,
    /// Per local expert: every row's token index on its source rank.
    pub src: Vec<Vec<i32>>,
    /// `[expert * ranks + source]`: `(begin << 32) | count`.
    pub range: Vec<u64>,
}

/// Whether one of the `k` ids `ids` names `g`.
fn names(ids: &[i32], g: usize) -> bool {
    ids.contains(&(g as i32))
}

/// What rank `d` receives when every rank `s` dispatches `inputs[s]` in decode mode, rows of
/// `row_bytes`, `experts` experts over `inputs.len()` ranks.
///
/// # Panics
/// If the experts do not split evenly over the ranks.
pub fn received(inputs: &[RankInput], d: usize, experts: usize, row_bytes: usize) -> Received {
    let n = inputs.len();
    assert!(n > 0 && experts >= n && experts.is_multiple_of(n), "{experts} experts over {n} ranks");
    let epr = experts / n;
    let mut r = Received { x: vec![vec![]; epr], count: vec![0; epr], src: vec![vec![]; epr], range: vec![0; epr * n] };
    for j in 0..epr {
        let g = d * epr + j;
        for (s, inp) in inputs.iter().enumerate() {
            let begin = r.count[j];
            for t in 0..inp.tokens {
                if names(&inp.topk_idx[t * inp.k..(t + 1) * inp.k], g) {
                    r.x[j].extend_from_slice(&inp.x[t * row_bytes..(t + 1) * row_bytes]);
                    r.src[j].push(t as i32);
                    r.count[j] += 1;
                }
            }
            r.range[j * n + s] = ((begin as u64) << 32) | (r.count[j] - begin) as u64;
        }
    }
    r
}

/// The tests' experts on rank `rank` of `ranks`: local expert `j` (global `g`) multiplies its
/// rows by `g + 1` in f32, rounded to `dtype`; per local expert, one row per received row.
pub fn scaled_experts(dtype: DataType, recv: &Received, (rank, ranks): (usize, usize), experts: usize) -> Vec<Vec<u8>> {
    let epr = experts / ranks;
    (0..recv.x.len())
        .map(|j| {
            let g = (rank * epr + j) as f32;
            from_f32(dtype, &to_f32(dtype, &recv.x[j]).iter().map(|v| v * (g + 1.0)).collect::<Vec<_>>())
        })
        .collect()
}

/// The expert outputs `rows` (per local expert, whole rows of `row_bytes`) in the decode
/// layout a combine takes: `capacity` rows per expert, the rows past each expert's count filled
/// with `0xff` bytes (NaN in bf16 and f32: a combine that read them would return NaN).
pub fn expert_major(rows: &[Vec<u8>], capacity: usize, row_bytes: usize) -> Vec<u8> {
    let mut out = vec![0xffu8; rows.len() * capacity * row_bytes];
    for (j, r) in rows.iter().enumerate() {
        out[j * capacity * row_bytes..][..r.len()].copy_from_slice(r);
    }
    out
}

/// What the decode combine returns on rank `me` (its batch `input`): see the module
/// documentation. `recv[d]` and `outputs[d]` are what rank `d` received and its experts'
/// outputs (per local expert); rows of `row_bytes` of `dtype`.
///
/// # Panics
/// If a token's row is missing from the rank of one of its experts.
pub fn combine(
    dtype: DataType,
    input: &RankInput,
    me: usize,
    (recv, outputs): (&[Received], &[Vec<Vec<u8>>]),
    experts: usize,
    row_bytes: usize,
) -> Vec<u8> {
    let n = recv.len();
    let epr = experts / n;
    let hidden = row_bytes / dtype.bytes();
    let mut acc = vec![0f32; input.tokens * hidden];
    for t in 0..input.tokens {
        for j in 0..input.k {
            let id = input.topk_idx[t * input.k + j];
            if !valid_expert(id, experts as u32) {
                continue;
            }
            let d = rank_of_expert(id as u32, experts as u32, n as u32) as usize;
            let le = id as usize - d * epr;
            let range = recv[d].range[le * n + me];
            let (begin, count) = ((range >> 32) as usize, range as u32 as usize);
            let i = recv[d].src[le][begin..begin + count]
                .iter()
                .position(|&s| s == t as i32)
                .unwrap_or_else(|| panic!("token {t} of rank {me} missing from expert {id}"));
            let y = to_f32(dtype, &outputs[d][le][(begin + i) * row_bytes..(begin + i + 1) * row_bytes]);
            let w = input.topk_weights[t * input.k + j];
            for (a, v) in acc[t * hidden..(t + 1) * hidden].iter_mut().zip(y) {
                *a += w * v;
            }
        }
    }
    from_f32(dtype, &acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{Routing, moe_exact, random_input};
    use half::bf16;

    /// 4 experts on 2 ranks (0, 1 on rank 0; 2, 3 on rank 1), k = 3, rows of one f32.
    fn hand_inputs() -> Vec<RankInput> {
        let input = |tokens, topk_idx: Vec<i32>, topk_weights: Vec<f32>| RankInput {
            tokens,
            k: 3,
            x: from_f32(DataType::F32, &(0..tokens).map(|t| 10.0 * (t + 1) as f32).collect::<Vec<_>>()),
            topk_idx,
            topk_weights,
        };
        vec![
            // Token 0: experts 0 and 2; token 1: expert 1 twice and none; token 2: nothing.
            input(3, vec![0, 2, -1, 1, 1, -1, -1, -1, 9], vec![0.5, 0.25, 7.0, 1.0, 2.0, 7.0, 7.0, 7.0, 7.0]),
            // Token 0: experts 3, 0, 2.
            input(1, vec![3, 0, 2], vec![0.5, 0.25, 0.125]),
        ]
    }

    #[test]
    fn dispatch_by_hand() {
        let inputs = hand_inputs();
        let r0 = received(&inputs, 0, 4, 4);
        assert_eq!(r0.count, [2, 1], "expert 0: token 0 of both ranks; expert 1: token 1 of rank 0, once");
        assert_eq!(r0.src, [vec![0, 0], vec![1]]);
        assert_eq!(to_f32(DataType::F32, &r0.x[0]), [10.0, 10.0]);
        assert_eq!(to_f32(DataType::F32, &r0.x[1]), [20.0]);
        assert_eq!(r0.range, [1, (1 << 32) | 1, 1, 1 << 32], "(begin << 32) | count by (expert, source)");
        let r1 = received(&inputs, 1, 4, 4);
        assert_eq!(r1.count, [2, 1]);
        assert_eq!(r1.src, [vec![0, 0], vec![0]]);
        assert_eq!(r1.range, [1, (1 << 32) | 1, 0, 1]);
    }

    #[test]
    fn combine_by_hand() {
        let inputs = hand_inputs();
        let recv: Vec<Received> = (0..2).map(|d| received(&inputs, d, 4, 4)).collect();
        let ys: Vec<Vec<Vec<u8>>> = (0..2).map(|d| scaled_experts(DataType::F32, &recv[d], (d, 2), 4)).collect();
        // Rank 0, token 0: 0.5 * 1 * 10 + 0.25 * 3 * 10; token 1: (1 + 2) * 2 * 20; token 2: 0.
        let out0 = to_f32(DataType::F32, &combine(DataType::F32, &inputs[0], 0, (&recv, &ys), 4, 4));
        assert_eq!(out0, [12.5, 120.0, 0.0]);
        // Rank 1, token 0: 0.5 * 4 * 10 + 0.25 * 1 * 10 + 0.125 * 3 * 10.
        let out1 = to_f32(DataType::F32, &combine(DataType::F32, &inputs[1], 1, (&recv, &ys), 4, 4));
        assert_eq!(out1, [20.0 + 2.5 + 3.75]);
        // Empty batches everywhere: nothing received, nothing returned.
        let empty: Vec<RankInput> = (0..2).map(|_| RankInput { tokens: 0, k: 3, ..inputs[0].clone() }).collect();
        let r = received(&empty, 1, 4, 4);
        assert_eq!((r.count, r.range), (vec![0, 0], vec![0; 4]));
    }

    #[test]
    fn sums_in_slot_order_round_once() {
        // bf16: 1 + 2^-8 + 2^-8 is 1 rounded per addition in bf16, 1 + 2^-7 in f32 rounded once.
        let x = from_f32(DataType::Bf16, &[1.0, 1.0]);
        let input = RankInput { tokens: 1, k: 3, x: x[..2].to_vec(), topk_idx: vec![0, 1, 2], topk_weights: vec![] };
        let inputs = vec![RankInput { topk_weights: vec![1.0, 2f32.powi(-8), 2f32.powi(-8)], ..input }];
        let recv = vec![received(&inputs, 0, 3, 2)];
        let ones = vec![vec![from_f32(DataType::Bf16, &[1.0]); 3]];
        let out = combine(DataType::Bf16, &inputs[0], 0, (&recv, &ones), 3, 2);
        assert_eq!(bf16::from_le_bytes([out[0], out[1]]).to_f32(), 1.0 + 2f32.powi(-7));
    }

    #[test]
    fn random_batches_give_the_mixture() {
        let (experts, n, hidden, k) = (16, 4, 8, 6);
        for dtype in [DataType::Bf16, DataType::F32] {
            let inputs: Vec<RankInput> = (0..n)
                .map(|r| random_input(4, r, dtype, 20 + r, hidden, k, (experts, n), Routing::Random { none: 0.2 }))
                .collect();
            let row = hidden * dtype.bytes();
            let recv: Vec<Received> = (0..n).map(|d| received(&inputs, d, experts, row)).collect();
            for (d, r) in recv.iter().enumerate() {
                // Every (token, expert) once: the counts are the distinct experts of each rank.
                for j in 0..experts / n {
                    let g = (d * experts / n + j) as i32;
                    let want: usize =
                        inputs.iter().map(|i| i.topk_idx.chunks(k).filter(|ids| ids.contains(&g)).count()).sum();
                    assert_eq!(r.count[j] as usize, want);
                    assert_eq!(r.x[j].len(), want * row);
                }
            }
            let ys: Vec<Vec<Vec<u8>>> = (0..n).map(|d| scaled_experts(dtype, &recv[d], (d, n), experts)).collect();
            for (s, inp) in inputs.iter().enumerate() {
                let out = to_f32(dtype, &combine(dtype, inp, s, (&recv, &ys), experts, row));
                let (want, mag) = moe_exact(dtype, inp, experts);
                let eps = if dtype == DataType::Bf16 { 3.0 / 256.0 } else { 1e-5 };
                for i in 0..out.len() {
                    assert!((out[i] as f64 - want[i]).abs() <= eps * mag[i] + 1e-30, "{dtype:?} {i}");
                }
            }
        }
        let rows = vec![vec![1u8, 2], vec![]];
        assert_eq!(expert_major(&rows, 2, 2), [1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    }
}
