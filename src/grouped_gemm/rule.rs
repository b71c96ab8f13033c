//! Which CUTLASS sm_90 instance (tile, cluster, schedule) and scheduler settings (raster
//! order, swizzle) a grouped GEMM uses: a rule on the problem's shape and format pair only,
//! kept apart from the kernels (`hip/grouped_gemm/cutlass/`), so it can be read, tested
//! on any machine and changed from measurements without touching kernel code. The
//! measurements behind it are in bench/NOTES-gemm.md.
//!
//! The launcher's `config` integer (hip/grouped_gemm/cutlass/sm90.hip): bits 0-7 the
//! instance kind, bits 8-9 the raster order (0 along M, 1 along N), bits 12-15 log2 of the
//! group scheduler's max swizzle size.

use crate::format::Fp8Format;

/// The instance kinds compiled for sm_90 (`kind` ids of sm90.hip's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutlassKind {
    pub id: u8,
    pub name: &'static str,
    /// Format pairs (a, b) compiled with this kind.
    pub pairs: &'static [(Fp8Format, Fp8Format)],
}

const E4: Fp8Format = Fp8Format::E4M3Fn;
const E5: Fp8Format = Fp8Format::E5M2;
const ALL_PAIRS: &[(Fp8Format, Fp8Format)] = &[(E4, E4), (E4, E5), (E5, E4)];
const E4_ONLY: &[(Fp8Format, Fp8Format)] = &[(E4, E4)];

/// Every compiled kind (sm90.hip's table, checked against it by the GPU tests through
/// `hipfp8_gg_cutlass_has_instance`).
pub const CUTLASS_KINDS: &[CutlassKind] = &[
    CutlassKind {
        id: 1,
        name: "coop-128x256-c2x1",
        pairs: ALL_PAIRS,
    },
    CutlassKind {
        id: 2,
        name: "pingpong-128x128-c2x1",
        pairs: ALL_PAIRS,
    },
    CutlassKind {
        id: 3,
        name: "coop-256x128-c1x2",
        pairs: E4_ONLY,
    },
    CutlassKind {
        id: 4,
        name: "coop-128x256-c1x2",
        pairs: E4_ONLY,
    },
];

/// Format pairs with at least one CUTLASS instance.
pub fn cutlass_has_pair(fa: Fp8Format, fb: Fp8Format) -> bool {
    CUTLASS_KINDS.iter().any(|k| k.pairs.contains(&(fa, fb)))
}

/// One choice: instance kind plus scheduler settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutlassChoice {
    pub kind: u8,
    /// Raster along N (else along M, CUTLASS's default for grouped problems).
    pub raster_n: bool,
    /// log2 of the scheduler's max swizzle size (0..=3).
    pub swizzle_log2: u8,
}

impl CutlassChoice {
    /// The launcher's `config` integer.
    pub fn config(self) -> i32 {
        i32::from(self.kind)
            | (i32::from(self.raster_n) << 8)
            | (i32::from(self.swizzle_log2) << 12)
    }

    /// e.g. `coop-128x256-c2x1/raster-m/swz1`.
    pub fn describe(self) -> String {
        let name = CUTLASS_KINDS
            .iter()
            .find(|k| k.id == self.kind)
            .map_or("unknown", |k| k.name);
        format!(
            "{name}/raster-{}/swz{}",
            if self.raster_n { "n" } else { "m" },
            1u32 << self.swizzle_log2
        )
    }

    /// Parse `KIND[:m|n[:SWIZZLE]]` (e.g. `3:n:4`), or `cooperative` / `pingpong`; `auto`
    /// or empty is `None` (the rule decides).
    pub fn parse(s: &str) -> Result<Option<CutlassChoice>, String> {
        let s = s.trim();
        match s {
            "" | "auto" | "0" => return Ok(None),
            "cooperative" => return Ok(Some(CutlassChoice::plain(1))),
            "pingpong" => return Ok(Some(CutlassChoice::plain(2))),
            _ => {}
        }
        let mut it = s.split(':');
        let kind: u8 = it
            .next()
            .and_then(|k| k.parse().ok())
            .filter(|k| CUTLASS_KINDS.iter().any(|c| c.id == *k))
            .ok_or_else(|| format!("{s:?}: the kind is not one of 1-{}", CUTLASS_KINDS.len()))?;
        let raster_n = match it.next() {
            None | Some("m") => false,
            Some("n") => true,
            Some(r) => return Err(format!("{s:?}: raster {r:?} is not m or n")),
        };
        let swizzle_log2 = match it.next() {
            None | Some("1") => 0,
            Some("2") => 1,
            Some("4") => 2,
            Some("8") => 3,
            Some(w) => return Err(format!("{s:?}: swizzle {w:?} is not 1, 2, 4 or 8")),
        };
        if it.next().is_some() {
            return Err(format!("{s:?}: expected KIND[:m|n[:SWIZZLE]]"));
        }
        Ok(Some(CutlassChoice {
            kind,
            raster_n,
            swizzle_log2,
        }))
    }

    fn plain(kind: u8) -> CutlassChoice {
        CutlassChoice {
            kind,
            raster_n: false,
            swizzle_log2: 0,
        }
    }
}

/// The problem as the rule sees it (host-known extents only; group sizes live on the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleShape {
    /// 2D x 3D: out (m, n), reduction k, `groups` experts.
    TwoD3D {
        m: usize,
        n: usize,
        k: usize,
        groups: usize,
    },
    /// 2D x 2D: out (groups, n, k), reduction over mt tokens.
    TwoD2D {
        n: usize,
        mt: usize,
        k: usize,
        groups: usize,
    },
}

/// The rule. Measured on the H200 (bench/NOTES-gemm.md, bench/results/h200-gemm.md and
/// the sweep bench/results/s9-a/h200-gemm-sweep.json):
/// * 2D x 3D with at most `SMALL_GROUP_ROWS` rows per group on average (small experts):
///   cooperative 128x256 with a 1x2 cluster (the B tile multicast along M pays when each
///   group has a single 128-row tile; 151 vs 190 us at 128 rows per expert).
/// * 2D x 3D otherwise: pingpong 128x128 when the reduction is shorter than the output is
///   wide (K < N, its overlapped epilogue pays); cooperative 128x256 otherwise.
/// * 2D x 2D: cooperative 128x256.
///
/// Kinds compiled only for E4M3 x E4M3 are never chosen for another pair: such a pair gets
/// the choice for the shape without them.
pub fn cutlass_rule(shape: RuleShape, fa: Fp8Format, fb: Fp8Format) -> CutlassChoice {
    let general = match shape {
        RuleShape::TwoD3D { n, k, .. } if k < n => 2,
        RuleShape::TwoD3D { .. } | RuleShape::TwoD2D { .. } => 1,
    };
    let preferred = match shape {
        RuleShape::TwoD3D { m, groups, .. } if m <= SMALL_GROUP_ROWS.saturating_mul(groups) => 4,
        _ => general,
    };
    let choice = if available(CutlassChoice::plain(preferred), fa, fb) {
        CutlassChoice::plain(preferred)
    } else {
        CutlassChoice::plain(general)
    };
    debug_assert!(available(choice, fa, fb) || !cutlass_has_pair(fa, fb));
    choice
}

/// Average rows per group at or below which a 2D x 3D GEMM counts as small-expert.
pub const SMALL_GROUP_ROWS: usize = 128;

/// Whether `choice` names a kind compiled for `fa x fb`.
pub fn available(choice: CutlassChoice, fa: Fp8Format, fb: Fp8Format) -> bool {
    CUTLASS_KINDS
        .iter()
        .any(|k| k.id == choice.kind && k.pairs.contains(&(fa, fb)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_config_round_trip() {
        let c = CutlassChoice::parse("3:n:4").unwrap().unwrap();
        assert_eq!(
            c,
            CutlassChoice {
                kind: 3,
                raster_n: true,
                swizzle_log2: 2
            }
        );
        assert_eq!(c.config(), 3 | (1 << 8) | (2 << 12));
        assert_eq!(c.describe(), "coop-256x128-c1x2/raster-n/swz4");
        assert_eq!(CutlassChoice::parse("auto").unwrap(), None);
        assert_eq!(CutlassChoice::parse("pingpong").unwrap().unwrap().kind, 2);
        for bad in ["9", "1:x", "1:m:3", "1:m:2:0", "x"] {
            assert!(CutlassChoice::parse(bad).is_err(), "{bad}");
        }
    }

    /// A 2D x 3D rule shape (m, n, k, groups).
    fn d3(m: usize, n: usize, k: usize, groups: usize) -> RuleShape {
        RuleShape::TwoD3D { m, n, k, groups }
    }

    /// A 2D x 2D rule shape (n, mt, k, groups).
    fn d2(n: usize, mt: usize, k: usize, groups: usize) -> RuleShape {
        RuleShape::TwoD2D { n, mt, k, groups }
    }

    #[test]
    fn rule_picks_a_compiled_kind_for_every_pair_and_benchmark_shape() {
        let shapes = [
            d3(32768, 2048, 7168, 32),
            d3(32768, 7168, 2048, 32),
            d2(7168, 32768, 2048, 32),
            d2(2048, 32768, 7168, 32),
            d3(16384, 5760, 2880, 32),
            d3(16384, 2880, 2880, 32),
            d2(2880, 16384, 2880, 32),
            d3(8192, 2048, 7168, 32),
        ];
        for &(fa, fb) in ALL_PAIRS {
            for s in shapes {
                let c = cutlass_rule(s, fa, fb);
                assert!(available(c, fa, fb), "{s:?} {fa} x {fb}: {c:?}");
                assert!((0..1 << 16).contains(&c.config()));
            }
        }
        let small = d3(4096, 2048, 7168, 32);
        assert_eq!(cutlass_rule(small, E4, E4).kind, 4);
        assert_eq!(
            cutlass_rule(small, E4, E5).kind,
            1,
            "kind 4 is E4M3 x E4M3 only"
        );
        let big = d3(4097, 2048, 7168, 32);
        assert_eq!(cutlass_rule(big, E4, E4).kind, 1);
        assert!(!cutlass_has_pair(E5, E5));
        assert!(!cutlass_has_pair(Fp8Format::E4M3FnUz, Fp8Format::E4M3FnUz));
    }
}
