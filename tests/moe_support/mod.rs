//! Shared by the MoE suites (`moe_reference`, `gpu_moe`): routing splits (END offsets) of the
//! kinds the recipe sees, and the typed views of a test tensor.
#![allow(dead_code)]

use crate::common::{Rng, Tensor, offsets};

/// How tokens are split over the groups.
#[derive(Clone, Copy, Debug)]
pub enum Split {
    /// Equal groups (the remainder spread over the first ones).
    Balanced,
    /// Zipf-like sizes (weight 1/(i+1)^1.2, randomly permuted), two groups forced empty.
    Zipf,
    /// The shared generator's mix: many empty and one-row groups, may stop short of `m`.
    Ragged,
    /// Every group one row (groups past `m` empty).
    OneRow,
}

pub const SPLITS: [Split; 4] = [Split::Balanced, Split::Zipf, Split::Ragged, Split::OneRow];

/// END offsets of `g` groups over `m` rows.
pub fn split_offsets(split: Split, seed: u64, g: usize, m: usize) -> Vec<i32> {
    match split {
        Split::Balanced => (1..=g).map(|i| (m * i / g.max(1)) as i32).collect(),
        Split::OneRow => (1..=g).map(|i| i.min(m) as i32).collect(),
        Split::Ragged => offsets(seed, g, m),
        Split::Zipf => {
            let mut r = Rng::new(seed);
            let mut w: Vec<f64> = (0..g).map(|i| 1.0 / ((i + 1) as f64).powf(1.2)).collect();
            for i in (1..g).rev() {
                w.swap(i, r.below(i as u64 + 1) as usize);
            }
            if g >= 3 {
                w[r.below(g as u64) as usize] = 0.0;
                w[r.below(g as u64) as usize] = 0.0;
            }
            let tot = w.iter().sum::<f64>().max(1e-9);
            let mut acc = 0.0;
            let mut o: Vec<i32> = w
                .iter()
                .map(|x| {
                    acc += x / tot;
                    ((acc * m as f64).round() as usize).min(m) as i32
                })
                .collect();
            for i in 1..g {
                o[i] = o[i].max(o[i - 1]);
            }
            if let Some(l) = o.last_mut() {
                *l = m as i32;
            }
            o
        }
    }
}

/// A test tensor's elements as the op's input type.
pub fn as_bf16(t: &Tensor) -> &[hipfp8::bf16] {
    t.b.as_deref().expect("a bf16 tensor")
}
