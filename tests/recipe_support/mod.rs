//! What tests/recipe_cpu.rs and tests/gpu_recipe.rs share: the input generator.

use hipfp8::bf16;

/// Deterministic bf16 values in `[-2 scale, 2 scale)`, magnitudes varied by a factor of 8.
pub fn values(n: usize, seed: u64, scale: f64) -> Vec<bf16> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let mag = [0.25, 0.5, 1.0, 2.0][(s & 3) as usize];
            bf16::from_f64((u * 2.0 - 1.0) * scale * mag)
        })
        .collect()
}
