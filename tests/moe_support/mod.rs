//! Shared by the MoE suites (`moe_reference`, `moe_emu`, `gpu_moe`): routing splits (END
//! offsets) of the kinds the recipe sees, and the scale outputs of the fused casts.
#![allow(dead_code)]

use hipfp8::ScaleOutput;
use proptest::prelude::*;

use crate::common::{offsets, skewed_offsets};

/// Both scale outputs of the fused MoE casts.
pub const SCALE_OUTPUTS: [ScaleOutput; 2] = [ScaleOutput::Forward, ScaleOutput::Dequant];

/// Either scale output.
pub fn scale_output() -> impl Strategy<Value = ScaleOutput> {
    prop::sample::select(SCALE_OUTPUTS.to_vec())
}

/// How tokens are split over the groups.
#[derive(Clone, Copy, Debug)]
pub enum Split {
    /// Equal groups (the remainder spread over the first ones).
    Balanced,
    /// Zipf-like sizes (weight 1/(i+1)^1.2, randomly permuted), two groups forced empty
    /// (`common::skewed_offsets`).
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
        Split::Zipf => skewed_offsets(seed, g, m),
    }
}
