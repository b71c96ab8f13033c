//! The fused MoE cast kernels (hip/moe/casts.hip) run on the host through the HIP emulation
//! (tests/emu/quant_port_emu.h: blocks as std::threads, emulated wavefront shuffles; harness
//! tests/emu/moe_emu.cpp) against the CPU reference (src/reference/moe.rs), bit for bit: every
//! op, all four formats, pow2 on/off, forward and dequant scale outputs, bf16 and f32 inputs with special values, balanced / Zipf
//! / ragged / one-row splits, grids smaller than the work (the grid-stride loops), and the
//! SwiGLU arithmetic of hip/moe/swiglu.h compiled by a host C++ compiler. The GPU run of the
//! same kernels is tests/gpu_moe.rs; this checks indexing and arithmetic without a GPU.
//!
//! Needs a C++20 compiler (g++); skips with a printed reason outside cargo when there is none.

mod common;
mod emu_support;
mod moe_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Fill, Rng, SENT_F32, SENT_U8, Tensor, same_bits};
use emu_support::{build, write_hp};
use hipfp8::reference::{Dual, Grouped, Rule, Scaled, moe};
use hipfp8::{Fp8Format, ScaleOutput};
use moe_support::{SCALE_OUTPUTS, SPLITS, split_offsets};
use support::{cxx, have_tool, run, scratch};

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One case: `op` as in tests/emu/moe_emu.cpp, dims (d0, d1, d2), `offs`.
struct Case {
    op: u32,
    fmt: Fp8Format,
    pow2: bool,
    scales: ScaleOutput,
    fill: Fill,
    d: [usize; 3],
    offs: Vec<i32>,
    grid: (u32, u32),
    /// The row casts in the 32-thread, one-chunk-per-thread instance (rows past 256 source
    /// columns take the re-read path).
    tiny: bool,
    /// Ops 1-3: the column output in the padded layout of this many rows (0: unpadded).
    m_cap: usize,
    /// Ops 1-3: the columns through the split pass with this many blocks per group (0: the
    /// one-kernel column pass).
    split: usize,
    /// The split pass's codes kernel: rows per thread (4, 8 or 16; at most the source's).
    codes_rpt: usize,
}

/// The smallest padded layout of a grouped case: `round_up(m + 15*G, 16)`.
fn pad_cap(m: usize, g: usize) -> usize {
    (m + 15 * g).div_ceil(16) * 16
}

/// The CPU reference's four outputs for `c` (sentinel-prefilled, 7 spare elements each), the
/// column output padded by `moe::pad_cols` when `c.m_cap > 0` (with the padded offsets).
/// The reference's outputs: (codes, scales) of the rows and of the columns, the padded offsets.
type Want = ([(Vec<u8>, Vec<f32>); 2], Vec<i32>);

fn reference(c: &Case, x: &Tensor, dh: &Tensor) -> Want {
    let [d0, d1, d2] = c.d;
    let g = c.offs.len();
    let (no, ns, ns2) = match c.op {
        0 | 4 => (d0 * d1 * d2, d0 * d2, d0 * d1),
        3 => (d0 * 2 * d1, d0, g * 2 * d1),
        _ => (d0 * d1, d0, g * d1),
    };
    let (mut o, mut s) = (vec![SENT_U8; no + 7], vec![SENT_F32; ns + 7]);
    let (mut o2, mut s2) = (vec![SENT_U8; no + 7], vec![SENT_F32; ns2 + 7]);
    let (rule, so, offs) = (Rule::new(c.fmt, c.pow2), c.scales, &c.offs[..]);
    let rows = Scaled::new(&mut o, &mut s);
    let cols = Scaled::new(&mut o2, &mut s2);
    let out = Dual { rows, cols };
    macro_rules! go {
        ($x:expr, $dh:expr) => {
            match c.op {
                0 | 4 => moe::weights_dual(rule, so, (d0, d1, d2), $x, out),
                1 => moe::act_dual(
                    rule,
                    so,
                    Grouped {
                        m: d0,
                        k: d1,
                        x: $x,
                        offs,
                    },
                    out,
                )
                .unwrap(),
                2 => {
                    let gu = Grouped {
                        m: d0,
                        k: 2 * d1,
                        x: $x,
                        offs,
                    };
                    moe::swiglu_quant(rule, so, gu, out).unwrap()
                }
                _ => {
                    let gu = Grouped {
                        m: d0,
                        k: 2 * d1,
                        x: $x,
                        offs,
                    };
                    moe::swiglu_bwd_quant(rule, so, gu, $dh, out).unwrap()
                }
            }
        };
    }
    match (&x.b, &dh.b) {
        (Some(b), Some(db)) => go!(b, db),
        _ => go!(&x.vals, &dh.vals),
    }
    let mut pend = vec![0i32; g];
    if c.m_cap > 0 {
        let w = if c.op == 3 { 2 * d1 } else { d1 };
        let mut p = vec![SENT_U8; w * c.m_cap + 7];
        moe::pad_cols((w, d0), &c.offs, &o2, c.m_cap, &mut p, &mut pend);
        o2 = p;
    }
    ([(o, s), (o2, s2)], pend)
}

fn check_case(exe: &Path, dir: &Path, c: &Case) {
    let [d0, d1, d2] = c.d;
    let (xn, xrow) = match c.op {
        0 | 4 => (d0 * d1 * d2, d1),
        1 => (d0 * d1, d1),
        _ => (d0 * 2 * d1, 2 * d1),
    };
    let x = Tensor::new(&c.fill, xn, xrow);
    let dh = Tensor::new(
        &Fill {
            seed: c.fill.seed ^ 0x77,
            ..c.fill
        },
        d0 * d1,
        d1,
    );
    let input = if matches!(c.op, 0 | 1 | 4) {
        "x.bin"
    } else {
        "gu.bin"
    };
    write_hp(&dir.join(input), &x);
    write_hp(&dir.join("dh.bin"), &dh);
    let ob: Vec<u8> = c.offs.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("offs.bin"), ob).unwrap();
    let args = [
        c.op as usize,
        c.fmt as usize,
        c.pow2 as usize,
        (c.scales == ScaleOutput::Dequant) as usize,
        c.fill.bf16 as usize,
        d0,
        d1,
        d2,
        c.offs.len(),
        c.grid.0 as usize,
        c.grid.1 as usize,
        c.tiny as usize,
        c.m_cap,
        c.split,
        c.codes_rpt,
    ];
    run(Command::new(exe).args(args.map(|a| a.to_string())).arg(dir));
    let (want, want_pend) = reference(c, &x, &dh);
    let what = format!(
        "op {} {:?} pow2={} {:?} bf16={} d={:?} offs={:?} grid={:?} tiny={} m_cap={} split={} codes_rpt={}",
        c.op,
        c.fmt,
        c.pow2,
        c.scales,
        c.fill.bf16,
        c.d,
        c.offs,
        c.grid,
        c.tiny,
        c.m_cap,
        c.split,
        c.codes_rpt
    );
    if c.m_cap > 0 && !c.offs.is_empty() {
        let p: Vec<i32> = std::fs::read(dir.join("pend.bin"))
            .unwrap()
            .chunks(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(p, want_pend, "{what}: padded offsets");
    }
    for (i, (name_o, name_s)) in [("out.bin", "scales.bin"), ("out2.bin", "scales2.bin")]
        .iter()
        .enumerate()
    {
        let o = std::fs::read(dir.join(name_o)).unwrap();
        let s = read_f32(&dir.join(name_s));
        let (wo, ws) = &want[i];
        assert_eq!(o.len(), wo.len(), "{what}: {name_o} length");
        if let Some(j) = (0..o.len()).find(|&j| o[j] != wo[j]) {
            panic!(
                "{what}: {name_o}[{j}] = {:#04x}, reference {:#04x}",
                o[j], wo[j]
            );
        }
        if let Some(j) = (0..s.len()).find(|&j| !same_bits(s[j], ws[j])) {
            panic!("{what}: {name_s}[{j}] = {:e}, reference {:e}", s[j], ws[j]);
        }
    }
}

/// The marked regions the harness includes.
const MOE_INCS: &[(&str, &str, &str)] = &[
    ("group_tables.inc", "hip/quant/common.hip", "group_tables"),
    ("moe_kernels.inc", "hip/moe/casts.hip", "moe_kernels"),
];

#[test]
fn moe_kernels_emulated_eq_reference() {
    let Some((dir, exe)) = emulator("moe_kernels_emulated_eq_reference") else {
        return;
    };
    let mut r = Rng::new(0x6d6f65);
    let mut n = 0;
    for op in 0..5u32 {
        for case in 0..12u64 {
            let fill = Fill {
                seed: r.next(),
                special_pct: [0, 0, 3, 20][case as usize % 4],
                zero_row_pct: [0, 10][case as usize % 2],
                mag_exp: r.below(40) as i32 - 20,
                bf16: case % 3 != 2,
            };
            let mut dims = [
                1 + r.below(70) as usize,
                1 + r.below(70) as usize,
                1 + r.below(40) as usize,
            ];
            if case % 4 == 1 {
                // whole 8-column chunks: the vector kernels
                dims[1] = 8 * (1 + dims[1] / 10);
            }
            let d = match op {
                0 => [r.below(4) as usize, dims[1], dims[2]],
                4 => [1 + r.below(3) as usize, dims[1], 2 + dims[2]],
                _ => [if case == 5 { 0 } else { dims[0] }, dims[1].min(40), 0],
            };
            let g = if matches!(op, 0 | 4) {
                0
            } else {
                r.below(7) as usize
            };
            let offs = split_offsets(SPLITS[case as usize % SPLITS.len()], r.next(), g, d[0]);
            let c = Case {
                op,
                fmt: Fp8Format::ALL[case as usize % 4],
                pow2: case % 2 == 1,
                // Each scale output with every format and both pow2 choices over the cases.
                scales: SCALE_OUTPUTS[(case as usize / 4 + case as usize) % 2],
                fill,
                d,
                offs,
                grid: (1 + r.below(3) as u32, 1 + r.below(3) as u32),
                tiny: case % 6 == 3,
                m_cap: 0,
                split: 0,
                codes_rpt: 8,
            };
            check_case(&exe, &dir, &c);
            n += 1;
        }
    }
    println!("{n} emulated cases bit-identical to the CPU reference");
}

/// The emulator built in test `test`'s scratch folder: (folder, executable), or None (after
/// a printed skip) without a C++ compiler.
fn emulator(test: &str) -> Option<(PathBuf, PathBuf)> {
    if !have_tool(test, &cxx()) {
        return None;
    }
    let dir = scratch(test);
    let exe = build(&dir, "moe_emu", MOE_INCS);
    Some((dir, exe))
}

/// One row of a shape table: (op, d, offs, bf16 input).
type ShapeRow = (u32, [usize; 3], Vec<i32>, bool);

/// The case of row `i` of a shape table: format, pow2 and scale outputs cycle with `i`,
/// values and grid are drawn from `r` (grid rows 1..=`grid_y`); not tiny, not padded.
fn table_case(
    r: &mut Rng,
    i: usize,
    (op, d, offs, bf16): ShapeRow,
    special_pct: u32,
    grid_y: u64,
) -> Case {
    let fill = Fill {
        seed: r.next(),
        special_pct,
        zero_row_pct: [0, 10][(i / 2) % 2],
        mag_exp: r.below(20) as i32 - 10,
        bf16,
    };
    Case {
        op,
        fmt: Fp8Format::ALL[i % 4],
        pow2: (i / 4) % 2 == 1,
        scales: SCALE_OUTPUTS[(i + i / 4) % 2],
        fill,
        d,
        offs,
        grid: (1 + r.below(3) as u32, 1 + r.below(grid_y) as u32),
        tiny: false,
        m_cap: 0,
        split: 0,
        codes_rpt: 8,
    }
}

/// Shapes past the kernels' on-chip limits: rows longer than the tiny row instance holds (the
/// re-read path), groups taller than one column sub-tile (512 rows of bf16 / 256 of f32 for the
/// plain sources, 128 for the SwiGLU ones: the reduce-then-re-read path), with empty, one-row
/// and tall groups and rows past the last END offset; both the vector (whole 8-column chunks)
/// and the element-wise kernels, bf16 and f32, every format, pow2 both.
#[test]
fn moe_kernels_emulated_eq_reference_large() {
    let Some((dir, exe)) = emulator("moe_kernels_emulated_eq_reference_large") else {
        return;
    };
    let mut r = Rng::new(0x6c6172);
    let mut n = 0;
    let shapes: [ShapeRow; 10] = [
        (1, [600, 264, 0], vec![0, 1, 1, 560, 590], true),
        (1, [600, 261, 0], vec![3, 3, 300, 600], false),
        (0, [2, 264, 600], vec![], true),
        (0, [2, 259, 300], vec![], false),
        (4, [2, 264, 600], vec![], true),
        (4, [3, 131, 301], vec![], false),
        (2, [300, 264, 0], vec![0, 1, 140, 140, 299], true),
        (2, [300, 259, 0], vec![150, 300], false),
        (3, [300, 136, 0], vec![1, 1, 200, 290], true),
        (3, [280, 131, 0], vec![0, 279], false),
    ];
    for (i, shape) in shapes.into_iter().enumerate() {
        let c = Case {
            tiny: i % 3 != 2,
            ..table_case(&mut r, i, shape, [0, 3][i % 2], 2)
        };
        check_case(&exe, &dir, &c);
        n += 1;
    }
    println!("{n} large emulated cases bit-identical to the CPU reference");
}

/// The padded column layout (the experts recipe's wgrad operands with `pad_wgrad`): ops 1-3
/// with the column output at 16-row aligned group starts in m_cap rows, against the reference
/// padded by `moe::pad_cols` (codes moved, padding and tail rows 0x00 even in NaN groups,
/// scales unchanged) and the padded offsets; groups of every alignment, empty, one-row and
/// taller than a column sub-tile, rows past the last offset, spare capacity past the minimum.
#[test]
fn moe_kernels_emulated_padded_columns() {
    let Some((dir, exe)) = emulator("moe_kernels_emulated_padded_columns") else {
        return;
    };
    let mut r = Rng::new(0x706164);
    let mut n = 0;
    let shapes: [ShapeRow; 9] = [
        (1, [600, 264, 0], vec![3, 3, 40, 561, 590], true),
        (1, [70, 24, 0], vec![0, 1, 17, 50], false),
        (1, [33, 13, 0], vec![33], true),
        (2, [300, 264, 0], vec![5, 5, 150, 299], true),
        (2, [45, 19, 0], vec![1, 2, 3, 45], false),
        (3, [280, 136, 0], vec![7, 9, 200, 270], true),
        (3, [50, 11, 0], vec![0, 0, 31], false),
        (1, [0, 16, 0], vec![0, 0], true),
        (2, [40, 16, 0], vec![], true),
    ];
    for (i, shape) in shapes.into_iter().enumerate() {
        let cap = pad_cap(shape.1[0], shape.2.len()) + 16 * (i % 3);
        let c = Case {
            m_cap: cap.max(16),
            ..table_case(&mut r, i, shape, [0, 3, 20][i % 3], 3)
        };
        check_case(&exe, &dir, &c);
        n += 1;
    }
    let mut split_cases = 0;
    for (k, split) in SPLITS.iter().enumerate() {
        for op in 1..4u32 {
            let (m, g) = (20 + r.below(200) as usize, 1 + r.below(9) as usize);
            let fill = Fill {
                seed: r.next(),
                special_pct: 2,
                zero_row_pct: 5,
                mag_exp: 0,
                bf16: k % 2 == 0,
            };
            let c = Case {
                op,
                fmt: Fp8Format::ALL[(k + op as usize) % 4],
                pow2: k % 2 == 1,
                scales: SCALE_OUTPUTS[op as usize % 2],
                fill,
                d: [m, 8 * (1 + r.below(5) as usize), 0],
                offs: split_offsets(*split, r.next(), g, m),
                grid: (1 + r.below(3) as u32, 1 + r.below(3) as u32),
                tiny: false,
                m_cap: pad_cap(m, g),
                split: 0,
                codes_rpt: 8,
            };
            check_case(&exe, &dir, &c);
            split_cases += 1;
        }
    }
    println!("{n} + {split_cases} padded emulated cases bit-identical to the padded reference");
}

/// The fused pass (the row kernel merging each group's column amax, col_codes_kernel,
/// col_scale_kernel: the launch of every fused MoE cast whose rows fit the row kernel's
/// registers): the same bytes as the reference, for every source (weights and their pair source
/// with uniform groups, activations, both SwiGLU sources), groups taller than a sub-tile (dealt
/// to several codes blocks, or to fewer blocks than sub-tiles), empty, one-row, rows past the
/// last offset, row ranges of one block spanning several groups and groups spanning several
/// blocks (row grids smaller than the rows), the tiny row instance, vector and element-wise
/// loads, unpadded and padded layouts, NaN and Inf inputs.
#[test]
fn moe_kernels_emulated_split_columns() {
    let Some((dir, exe)) = emulator("moe_kernels_emulated_split_columns") else {
        return;
    };
    let mut r = Rng::new(0x73706c);
    let shapes: [ShapeRow; 14] = [
        (2, [300, 264, 0], vec![5, 5, 150, 299], true),
        (3, [280, 136, 0], vec![0, 1, 200, 270], true),
        (2, [45, 19, 0], vec![1, 2, 3, 45], false),
        (3, [300, 11, 0], vec![0, 0, 290], false),
        (1, [600, 24, 0], vec![3, 3, 40, 561, 590], true),
        (1, [600, 13, 0], vec![300, 600], false),
        (2, [0, 16, 0], vec![0, 0], true),
        (3, [260, 16, 0], vec![260], false),
        (0, [3, 72, 40], vec![], true),
        (0, [2, 13, 600], vec![], false),
        (4, [2, 64, 300], vec![], true),
        (4, [3, 9, 7], vec![], false),
        (1, [700, 40, 0], vec![0, 350, 351, 700], true),
        (0, [4, 24, 33], vec![], true),
    ];
    let mut n = 0;
    for (i, shape) in shapes.into_iter().enumerate() {
        let cap = pad_cap(shape.1[0], shape.2.len()).max(16);
        let weights = matches!(shape.0, 0 | 4);
        let c = Case {
            m_cap: if i % 2 == 1 && !weights { cap } else { 0 },
            split: [1, 2, 3, 5][i % 4],
            codes_rpt: [16, 8, 4][i % 3],
            tiny: i >= 12,
            ..table_case(&mut r, i, shape, [0, 3, 20][i % 3], 3)
        };
        check_case(&exe, &dir, &c);
        n += 1;
    }
    println!("{n} fused-pass emulated cases bit-identical to the CPU reference");
}
