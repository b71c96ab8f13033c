//! The MoE routing kernels (hip/route/route.hip) run on the host through the HIP emulation
//! (tests/emu/quant_port_emu.h: blocks as std::threads, emulated wavefront shuffles; harness
//! tests/emu/route_emu.cpp, which queues the kernels as the launchers do) against the CPU
//! reference (src/reference/route.rs), bit for bit: dispatch_dual with and without per-slot
//! weights (the combine's backward), combine and combine_bwd_scores; all four formats, pow2
//! on/off, forward and dequant scales, bf16 and f32 inputs with special values, balanced /
//! Zipf / ragged (empty, one-row, unrouted tail) / one-row splits, alignments 1, 3, 16, 32,
//! 128, padded layouts larger than needed, permutation entries outside [0, t*topk) (zero rows,
//! as the kernels define them), row lengths that are not a multiple of the vector width, rows
//! longer than the row kernel keeps in registers, groups taller than one column step, grids
//! smaller than the work (the grid-stride loops). The GPU run of the same kernels is
//! tests/gpu_route.rs; this checks indexing and arithmetic without a GPU.
//!
//! Needs a C++20 compiler (g++); skips with a printed reason outside cargo when there is none.

mod common;
mod emu_support;
mod moe_support;
mod route_support;
mod support;

use std::path::Path;
use std::process::Command;

use common::{Fill, Rng, SENT_F32, SENT_U8, Tensor, same_bits};
use emu_support::{build, write_hp};
use hipfp8::reference::{Dual, Grouped, Rule, Scaled, moe, route};
use hipfp8::{Fp8Format, ScaleOutput, bf16};
use moe_support::{SPLITS, Split};
use route_support::Route;
use support::{cxx, have_tool, run, scratch};

fn write_i32(path: &Path, v: &[i32]) {
    std::fs::write(
        path,
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
}

fn write_f32(path: &Path, v: &[f32]) {
    std::fs::write(
        path,
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn read_i32(path: &Path) -> Vec<i32> {
    std::fs::read(path)
        .unwrap()
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One dispatch case.
struct Case {
    fmt: Fp8Format,
    pow2: bool,
    scales: ScaleOutput,
    fill: Fill,
    rt: Route,
    weighted: bool,
    /// Positions of `perm` replaced by entries outside [0, t*topk), and the permutation
    /// before that.
    bad: Vec<usize>,
    orig: Vec<i32>,
    grid: (u32, u32),
}

/// The padded matrix of a routing whose `perm` may hold entries outside [0, m): those rows are
/// zero rows (docs/OPS.md); the rest as src/reference/route.rs gathers.
fn gather<T: Copy + Default>(
    rt: &Route,
    pad: &[i32],
    x: &[T],
    w: Option<&[f32]>,
    mul: impl Fn(f32, T) -> T,
) -> Vec<T> {
    let (m, k) = (rt.m() as i64, rt.k);
    let mut xp = vec![T::default(); rt.m_cap * k];
    let mut lo = 0usize;
    for (gi, &end) in rt.offs.iter().enumerate() {
        let start = if gi == 0 { 0 } else { pad[gi - 1] as usize };
        for (i, &s) in rt.perm[lo..end as usize].iter().enumerate() {
            if !(0..m).contains(&(s as i64)) {
                continue;
            }
            let (s, p) = (s as usize, start + i);
            let src = &x[(s / rt.topk) * k..(s / rt.topk + 1) * k];
            for (d, &v) in xp[p * k..(p + 1) * k].iter_mut().zip(src) {
                *d = match w {
                    None => v,
                    Some(w) => mul(w[s], v),
                };
            }
        }
        lo = end as usize;
    }
    xp
}

/// What the dispatch writes for `c` (sentinel-prefilled, 7 spare elements each): offs_pad,
/// slot_row, (out, scales), (out_col, scales_col).
#[allow(clippy::type_complexity)]
fn reference(c: &Case, x: &Tensor, w: &[f32]) -> (Vec<i32>, Vec<i32>, [(Vec<u8>, Vec<f32>); 2]) {
    let rt = &c.rt;
    let (mc, k, g, m) = (rt.m_cap, rt.k, rt.g, rt.m());
    let (mut o, mut s) = (vec![SENT_U8; mc * k + 7], vec![SENT_F32; mc + 7]);
    let (mut o2, mut s2) = (vec![SENT_U8; mc * k + 7], vec![SENT_F32; g * k + 7]);
    let (mut pad, mut rows) = (vec![-7i32; g + 7], vec![-7i32; m + 7]);
    let rule = Rule::new(c.fmt, c.pow2);
    let wo = c.weighted.then_some(w);
    if c.bad.is_empty() {
        let r = route::Route {
            perm: &rt.perm,
            offs: &rt.offs,
            topk: rt.topk,
            align: rt.align,
            m_cap: mc,
        };
        let out = Dual {
            rows: Scaled::new(&mut o, &mut s),
            cols: Scaled::new(&mut o2, &mut s2),
        };
        match &x.b {
            Some(b) => route::dispatch_dual(rule, c.scales, k, b, wo, r, &mut pad, &mut rows, out),
            None => {
                route::dispatch_dual(rule, c.scales, k, &x.vals, wo, r, &mut pad, &mut rows, out)
            }
        }
        .unwrap();
    } else {
        // As route::dispatch_dual, with the out-of-range entries as zero rows: the slots they
        // replaced appear nowhere, so their slot_row entries are not written.
        route::padded_offsets(&rt.offs, rt.align, &mut pad[..g]);
        let (_, lay) = Route {
            perm: c.orig.clone(),
            ..rt.clone()
        }
        .layout();
        let bad_slots: Vec<i32> = c.bad.iter().map(|&i| c.orig[i]).collect();
        for (sl, &p) in lay.iter().enumerate() {
            rows[sl] = if bad_slots.contains(&(sl as i32)) {
                -7
            } else {
                p
            };
        }
        let tail = if g == 0 { 0 } else { pad[g - 1] as usize };
        for col in o2[..k * mc].chunks_mut(mc.max(1)) {
            col[tail..].fill(0);
        }
        let out = Dual {
            rows: Scaled::new(&mut o, &mut s),
            cols: Scaled::new(&mut o2, &mut s2),
        };
        match &x.b {
            Some(b) => {
                let xp = gather(rt, &pad, b, wo, |w, v| bf16::from_f32(w * v.to_f32()));
                let xg = Grouped {
                    m: mc,
                    k,
                    x: &xp,
                    offs: &pad[..g],
                };
                moe::act_dual(rule, c.scales, xg, out)
            }
            None => {
                let xp = gather(rt, &pad, &x.vals, wo, |w, v| w * v);
                let xg = Grouped {
                    m: mc,
                    k,
                    x: &xp,
                    offs: &pad[..g],
                };
                moe::act_dual(rule, c.scales, xg, out)
            }
        }
        .unwrap();
    }
    (pad, rows, [(o, s), (o2, s2)])
}

#[allow(clippy::too_many_arguments)]
fn args(
    op: u32,
    fmt: usize,
    pow2: bool,
    dequant: bool,
    bf: bool,
    weighted: bool,
    rt: &Route,
    grid: (u32, u32),
) -> Vec<String> {
    let v = [
        op as usize,
        fmt,
        pow2 as usize,
        dequant as usize,
        bf as usize,
        weighted as usize,
        rt.t,
        rt.k,
        rt.topk,
        rt.g,
        rt.align,
        rt.m_cap,
        grid.0 as usize,
        grid.1 as usize,
    ];
    v.iter().map(|a| a.to_string()).collect()
}

fn first_diff<T: PartialEq + std::fmt::Debug>(what: &str, name: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: {name} length");
    if let Some(j) = (0..got.len()).find(|&j| got[j] != want[j]) {
        panic!(
            "{what}: {name}[{j}] = {:?}, reference {:?}",
            got[j], want[j]
        );
    }
}

fn check_f32(what: &str, name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: {name} length");
    if let Some(j) = (0..got.len()).find(|&j| !same_bits(got[j], want[j])) {
        panic!(
            "{what}: {name}[{j}] = {:e}, reference {:e}",
            got[j], want[j]
        );
    }
}

fn check_dispatch(exe: &Path, dir: &Path, c: &Case) {
    let rt = &c.rt;
    let x = Tensor::new(&c.fill, rt.t * rt.k, rt.k);
    let w = rt.weights(c.fill.seed);
    write_hp(&dir.join("x.bin"), &x);
    write_f32(&dir.join("w.bin"), &w);
    write_i32(&dir.join("perm.bin"), &rt.perm);
    write_i32(&dir.join("offs.bin"), &rt.offs);
    let dequant = c.scales == ScaleOutput::Dequant;
    let a = args(
        0,
        c.fmt as usize,
        c.pow2,
        dequant,
        c.fill.bf16,
        c.weighted,
        rt,
        c.grid,
    );
    run(Command::new(exe).args(a).arg(dir));
    let (pad, rows, [(o, s), (o2, s2)]) = reference(c, &x, &w);
    let what = format!(
        "dispatch {:?} pow2={} {:?} bf16={} weighted={} t={} k={} topk={} align={} m_cap={} \
         offs={:?} bad={:?} grid={:?}",
        c.fmt,
        c.pow2,
        c.scales,
        c.fill.bf16,
        c.weighted,
        rt.t,
        rt.k,
        rt.topk,
        rt.align,
        rt.m_cap,
        rt.offs,
        c.bad,
        c.grid
    );
    first_diff(
        &what,
        "offs_pad",
        &read_i32(&dir.join("offs_pad.bin")),
        &pad,
    );
    first_diff(
        &what,
        "slot_row",
        &read_i32(&dir.join("slot_row.bin")),
        &rows,
    );
    first_diff(
        &what,
        "out",
        &std::fs::read(dir.join("out.bin")).unwrap(),
        &o,
    );
    check_f32(&what, "scales", &read_f32(&dir.join("scales.bin")), &s);
    first_diff(
        &what,
        "out_col",
        &std::fs::read(dir.join("out_col.bin")).unwrap(),
        &o2,
    );
    check_f32(
        &what,
        "scales_col",
        &read_f32(&dir.join("scales_col.bin")),
        &s2,
    );
}

/// A routing of `t` tokens (k columns, topk slots, g groups) with `extra` spare padded rows.
fn routing(
    seed: u64,
    dims: (usize, usize, usize, usize),
    split: Split,
    align: usize,
    extra: usize,
) -> Route {
    Route::new(seed, dims, split, align, extra)
}

/// The marked region the harness includes.
const ROUTE_INCS: &[(&str, &str, &str)] =
    &[("route_kernels.inc", "hip/route/route.hip", "route_kernels")];

#[test]
fn route_kernels_emulated_eq_reference() {
    let test = "route_kernels_emulated_eq_reference";
    if !have_tool(test, &cxx()) {
        return;
    }
    let dir = scratch(test);
    let exe = build(&dir, "route_emu", ROUTE_INCS);
    let mut r = Rng::new(0x726f757465);
    let aligns = [1usize, 16, 32, 128, 3];
    let mut n = 0;
    // (t, k, topk, g, align) shapes: small random ones, then the structural edges.
    let mut shapes: Vec<(usize, usize, usize, usize, usize)> = (0..20)
        .map(|i| {
            (
                r.below(24) as usize,
                1 + r.below(150) as usize,
                1 + r.below(4) as usize,
                r.below(7) as usize,
                aligns[i % aligns.len()],
            )
        })
        .collect();
    // Rows longer than the row kernel keeps in registers (8192 elements), odd and even.
    shapes.push((3, 8200, 2, 2, 16));
    shapes.push((2, 8256, 1, 3, 1));
    // Groups taller than one column pass (32 rows), than a 128-row alignment and than one
    // column step (128 rows: 600 rows a group, 160 rows past the registers' columns).
    shapes.push((70, 72, 4, 2, 16));
    shapes.push((40, 64, 8, 3, 128));
    shapes.push((150, 64, 8, 2, 16));
    shapes.push((20, 8200, 8, 1, 16));
    // No groups: every row a tail row.
    shapes.push((5, 40, 2, 0, 16));
    for (i, &(t, k, topk, g, align)) in shapes.iter().enumerate() {
        let seed = r.next();
        let split = SPLITS[i % SPLITS.len()];
        let extra = [0usize, 0, 5][i % 3];
        let mut rt = routing(seed, (t, k, topk, g), split, align, extra);
        let orig = rt.perm.clone();
        let mut bad = Vec::new();
        if i % 5 == 4 && rt.m() > 0 {
            for (j, v) in [-1i32, rt.m() as i32, i32::MIN, i32::MAX]
                .iter()
                .enumerate()
            {
                let pos = r.below(rt.m() as u64) as usize;
                if !bad.contains(&pos) && j < rt.m() {
                    rt.perm[pos] = *v;
                    bad.push(pos);
                }
            }
        }
        let c = Case {
            fmt: Fp8Format::ALL[i % 4],
            pow2: (i / 4) % 2 == 1,
            scales: if (i / 2) % 2 == 0 {
                ScaleOutput::Forward
            } else {
                ScaleOutput::Dequant
            },
            fill: Fill {
                seed: r.next(),
                special_pct: [0, 0, 3, 20][(i / 3) % 4],
                zero_row_pct: [0, 10][i % 2],
                mag_exp: r.below(40) as i32 - 20,
                bf16: i % 3 != 2,
            },
            rt,
            weighted: (i / 2) % 2 == 1,
            bad,
            orig,
            grid: (1 + r.below(3) as u32, 1 + r.below(3) as u32),
        };
        check_dispatch(&exe, &dir, &c);
        n += 1;
    }
    println!("{n} emulated dispatch cases bit-identical to the CPU reference");
}

#[test]
fn combine_kernels_emulated_eq_reference() {
    let test = "combine_kernels_emulated_eq_reference";
    if !have_tool(test, &cxx()) {
        return;
    }
    let dir = scratch(test);
    let exe = build(&dir, "route_emu", ROUTE_INCS);
    let mut r = Rng::new(0x636f6d62);
    let mut n = 0;
    for i in 0..16usize {
        let (t, k, topk, g) = match i {
            14 => (3, 600, 2, 2),
            15 => (2, 1030, 3, 1),
            _ => (
                r.below(12) as usize,
                r.below(90) as usize,
                1 + r.below(4) as usize,
                1 + r.below(5) as usize,
            ),
        };
        let seed = r.next();
        let rt = routing(
            seed,
            (t, k.max(1), topk, g),
            SPLITS[i % 4],
            [1, 16, 3][i % 3],
            3,
        );
        let rt = Route { k, ..rt };
        let bf = i % 3 != 2;
        let fill = Fill {
            seed: r.next(),
            special_pct: [0, 3, 20][i % 3],
            zero_row_pct: 10,
            mag_exp: r.below(20) as i32 - 10,
            bf16: bf,
        };
        let y = Tensor::new(&fill, rt.m_cap * k, k.max(1));
        let dout = Tensor::new(
            &Fill {
                seed: fill.seed ^ 0x55,
                ..fill
            },
            t * k,
            k.max(1),
        );
        let (_, mut rows) = rt.layout();
        // Entries outside [0, m_cap) are skipped by the kernels (and refused on the CPU): keep
        // them to the device's -1 here.
        if i % 4 == 3 && !rows.is_empty() {
            rows[0] = -1;
        }
        let w = rt.weights(fill.seed);
        write_hp(&dir.join("y.bin"), &y);
        write_hp(&dir.join("dout.bin"), &dout);
        write_i32(&dir.join("rows.bin"), &rows);
        write_f32(&dir.join("w.bin"), &w);
        let what = format!(
            "combine bf16={bf} t={t} k={k} topk={topk} m_cap={} rows={rows:?}",
            rt.m_cap
        );
        // combine
        let a = args(
            1,
            0,
            false,
            false,
            bf,
            false,
            &rt,
            (1 + r.below(3) as u32, 1),
        );
        run(Command::new(&exe).args(a).arg(&dir));
        let mut want = vec![bf16::from_bits(0xA5A5); t * k + 7];
        let shape = (t, k, topk, rt.m_cap);
        match &y.b {
            Some(b) => route::combine(shape, b, &rows, &w, &mut want),
            None => route::combine(shape, &y.vals, &rows, &w, &mut want),
        }
        .unwrap();
        let got: Vec<u16> = std::fs::read(dir.join("comb.bin"))
            .unwrap()
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let want: Vec<u16> = want.iter().map(|v| v.to_bits()).collect();
        first_diff(&what, "combine out", &got, &want);
        // combine_bwd_scores
        let a = args(
            2,
            0,
            false,
            false,
            bf,
            false,
            &rt,
            (1 + r.below(3) as u32, 1),
        );
        run(Command::new(&exe).args(a).arg(&dir));
        let mut want = vec![SENT_F32; t * topk + 7];
        match (&dout.b, &y.b) {
            (Some(a), Some(b)) => route::combine_bwd_scores(shape, a, b, &rows, &mut want),
            _ => route::combine_bwd_scores(shape, &dout.vals, &y.vals, &rows, &mut want),
        }
        .unwrap();
        check_f32(&what, "dweights", &read_f32(&dir.join("dw.bin")), &want);
        n += 1;
    }
    println!("{n} emulated combine / score-gradient cases bit-identical to the CPU reference");
}
