//! hipfp8-bench: every quantization op on the shapes of ../shared/BENCHMARKS.md (DeepSeek-V3
//! EP8 MoE shapes, balanced and Zipf-skewed groups; the M sweep; Llama3-8B dense shapes), with the
//! device-to-device copy bandwidth measured in the same run as the yardstick.
//!
//! Prints, per op and shape: median time (CUDA/HIP events around each launch, after warm-up),
//! GB/s over the minimal bytes (each input read once, each output written once) and % of copy.
//! `--json PATH` also writes the rows as JSON; `--quick` runs fewer iterations; `--filter A,B`
//! runs only ops whose name contains A or B. Exits with a printed reason when there is no GPU.
//!
//! Inputs are random normal-ish bf16 (never zeros: zeros would hide unwritten outputs and run
//! faster than real data); every tensor is larger than the L2 except the small end of the sweep.

use std::fmt::Write as _;
use std::time::Instant;

use hipfp8::device::{DeviceBuffer, Event, Stream};
use hipfp8::route::{CombineShape, DispatchShape};
use hipfp8::{
    CastParams, Context, Fp8Format, HpSrc, MxParams, MxRounding, NoParams, Scaling, StreamRef, bf16,
};
use rayon::prelude::*;

struct Row {
    op: String,
    shape: String,
    groups: String,
    us: f64,
    bytes: u64,
    gbps: f64,
    pct_copy: f64,
}

struct Bench {
    ctx: Context,
    stream: Stream,
    iters: usize,
    warmup: usize,
    copy_gbps: f64,
    rows: Vec<Row>,
    filter: Option<String>,
}

/// Zipf (s = 1.2) split of `m` tokens over `e` experts, multiples of 16, the last two empty,
/// the rounding remainder on the largest (BENCHMARKS.md "Real routing is not balanced").
pub fn zipf_sizes(m: usize, e: usize) -> Vec<usize> {
    let nz = e.saturating_sub(2).max(1);
    let w: Vec<f64> = (0..nz).map(|i| 1.0 / ((i + 1) as f64).powf(1.2)).collect();
    let tot: f64 = w.iter().sum();
    let mut sizes: Vec<usize> = w
        .iter()
        .map(|x| ((x / tot * m as f64) / 16.0).round() as usize * 16)
        .collect();
    let s: usize = sizes.iter().sum();
    if s > m {
        sizes[0] -= s - m;
    } else {
        sizes[0] += m - s;
    }
    sizes.resize(e, 0);
    sizes
}

/// The slot permutation of a routing with these group sizes: every slot gets an expert (a
/// fixed pseudo-random assignment with exactly `sizes[e]` slots for expert e), then the slots
/// in a stable sort by expert (the permutation a router's stable argsort makes).
fn sorted_routing(sizes: &[usize]) -> Vec<i32> {
    let mut expert: Vec<u32> = sizes
        .iter()
        .enumerate()
        .flat_map(|(e, &n)| std::iter::repeat_n(e as u32, n))
        .collect();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..expert.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        expert.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let mut perm: Vec<i32> = (0..expert.len() as i32).collect();
    perm.sort_by_key(|&s| expert[s as usize]);
    perm
}

fn ends(sizes: &[usize]) -> Vec<i32> {
    let mut acc = 0usize;
    sizes
        .iter()
        .map(|s| {
            acc += s;
            acc as i32
        })
        .collect()
}

fn random_bf16(n: usize, seed: u64) -> Vec<bf16> {
    (0..n)
        .into_par_iter()
        .map(|i| {
            // splitmix64 of the index: independent per element, so the parallel fill is deterministic
            let mut z = (i as u64)
                .wrapping_add(seed)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // sum of 4 uniforms ~ normal; plus a per-row-ish magnitude spread
            let u = |k: u32| ((z >> (16 * k)) & 0xFFFF) as f32 / 65536.0;
            let v = (u(0) + u(1) + u(2) + u(3) - 2.0) * 1.7;
            bf16::from_f32(v)
        })
        .collect()
}

impl Bench {
    fn enabled(&self, op: &str) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|f| f.split(',').any(|f| op.contains(f)))
    }

    /// Whether a section of ops named `prefix...` may hold an enabled op: no filter, or a
    /// filter naming such an op (or a part of the prefix). Its ops still check `enabled`.
    fn section(&self, prefix: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| {
            f.split(',')
                .any(|f| f.starts_with(prefix) || prefix.contains(f))
        })
    }

    /// Median microseconds of `f` (events around each call).
    fn time(&self, mut f: impl FnMut(StreamRef)) -> f64 {
        let s = self.stream.handle();
        for _ in 0..self.warmup {
            f(s);
        }
        self.stream.synchronize().unwrap();
        let evs: Vec<(Event, Event)> = (0..self.iters)
            .map(|_| {
                (
                    Event::new(&self.ctx).unwrap(),
                    Event::new(&self.ctx).unwrap(),
                )
            })
            .collect();
        for (a, b) in &evs {
            a.record(s).unwrap();
            f(s);
            b.record(s).unwrap();
        }
        self.stream.synchronize().unwrap();
        let mut t: Vec<f64> = evs
            .iter()
            .map(|(a, b)| a.elapsed_ms(b).unwrap() as f64 * 1e3)
            .collect();
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        t[t.len() / 2]
    }

    /// Time `f` (one call of `op` on the context and a stream) and record its row.
    fn case(
        &mut self,
        op: &str,
        shape: String,
        groups: &str,
        bytes: u64,
        mut f: impl FnMut(&Context, StreamRef) -> hipfp8::Result<()>,
    ) {
        let us = self.time(|s| f(&self.ctx, s).unwrap());
        self.record(op, shape, groups, us, bytes);
    }

    fn record(&mut self, op: &str, shape: String, groups: &str, us: f64, bytes: u64) {
        let gbps = bytes as f64 / (us * 1e-6) / 1e9;
        let pct = 100.0 * gbps / self.copy_gbps;
        println!("{op:34} {shape:24} {groups:9} {us:10.1} us {gbps:8.0} GB/s {pct:6.1}% of copy");
        self.rows.push(Row {
            op: op.into(),
            shape,
            groups: groups.into(),
            us,
            bytes,
            gbps,
            pct_copy: pct,
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args
        .iter()
        .position(|a| a == "--json")
        .map(|i| args[i + 1].clone());
    let filter = args
        .iter()
        .position(|a| a == "--filter")
        .map(|i| args[i + 1].clone());
    let quick = args.iter().any(|a| a == "--quick");
    let ctx = match Context::gpu(0) {
        Ok(c) => c,
        Err(e) => {
            println!("hipfp8-bench: no GPU to measure ({e}); nothing to do");
            return;
        }
    };
    println!(
        "hipfp8-bench on {} (backend {}, targets {})",
        ctx.device_name(),
        hipfp8::device::built_backend(),
        hipfp8::device::built_targets()
    );
    let stream = Stream::new_non_blocking(&ctx).unwrap();
    let mut b = Bench {
        ctx,
        stream,
        iters: if quick { 10 } else { 40 },
        warmup: 3,
        copy_gbps: 0.0,
        rows: Vec::new(),
        filter,
    };
    let t0 = Instant::now();

    // ---- the yardstick: 2 GiB device-to-device copy, bytes read + written
    {
        let n = 2usize << 30;
        let mut src = DeviceBuffer::<u8>::alloc(&b.ctx, n).unwrap();
        src.fill_bytes(0x5A).unwrap();
        let mut dst = DeviceBuffer::<u8>::alloc(&b.ctx, n).unwrap();
        let us = b.time(|s| dst.copy_from_async(&src, s).unwrap());
        b.copy_gbps = 2.0 * n as f64 / (us * 1e-6) / 1e9;
        println!(
            "copy 2 GiB D2D: {us:.1} us = {:.0} GB/s (read + write)",
            b.copy_gbps
        );
        b.rows.push(Row {
            op: "copy_d2d".into(),
            shape: "(2147483648,)".into(),
            groups: "".into(),
            us,
            bytes: 2 * n as u64,
            gbps: b.copy_gbps,
            pct_copy: 100.0,
        });
    }

    const MTOK: usize = 32768;
    const E: usize = 32;
    const H: usize = 7168;
    const I: usize = 2048;
    let max_elems = 131072 * H;
    let x = random_bf16(max_elems, 1);
    let dx = DeviceBuffer::from_host(&b.ctx, &x).unwrap();
    drop(x);
    let x2 = random_bf16(MTOK * H, 2);
    let dx2 = DeviceBuffer::from_host(&b.ctx, &x2).unwrap();
    drop(x2);
    let mut out = DeviceBuffer::<u8>::alloc(&b.ctx, max_elems + 16 * 1024 * 1024).unwrap();
    let mut out2 = DeviceBuffer::<u8>::alloc(&b.ctx, MTOK * H).unwrap();
    let mut sc = DeviceBuffer::<f32>::alloc(&b.ctx, 1 << 24).unwrap();
    let mut sc2 = DeviceBuffer::<f32>::alloc(&b.ctx, 1 << 24).unwrap();
    let mut e8 = DeviceBuffer::<u8>::alloc(&b.ctx, 1 << 26).unwrap();
    let mut amax = DeviceBuffer::<f32>::alloc(&b.ctx, 1).unwrap();
    let mut poffs = DeviceBuffer::<i32>::alloc(&b.ctx, 1024).unwrap();
    let xs = |n: usize| HpSrc::Bf16(dx.src_range(0..n).unwrap());
    let xs2 = |n: usize| HpSrc::Bf16(dx2.src_range(0..n).unwrap());
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    let balanced = ends(&vec![MTOK / E; E]);
    let zipf = ends(&zipf_sizes(MTOK, E));
    println!("zipf group sizes: {:?}", zipf_sizes(MTOK, E));
    let doffs_bal = DeviceBuffer::from_host(&b.ctx, &balanced).unwrap();
    let doffs_zipf = DeviceBuffer::from_host(&b.ctx, &zipf).unwrap();
    let routings = [("balanced", &doffs_bal), ("zipf", &doffs_zipf)];

    // ---- MoE: rowwise_2d and the M sweep
    if b.enabled("rowwise_2d") {
        for (m, k) in [
            (MTOK, H),
            (MTOK, I),
            (4096, H),
            (16384, H),
            (65536, H),
            (131072, H),
            (8192, 4096),
            (8192, 14336),
        ] {
            b.case(
                "rowwise_2d",
                format!("({m},{k})"),
                "",
                (3 * m * k + 4 * m) as u64,
                |c, s| c.rowwise_2d(&p, m, k, xs(m * k), out.dst(), sc.dst(), s),
            );
        }
    }
    // per_group_rowwise: groups run along the token axis, the columns of its input (the 2D
    // left operand of the wgrad grouped GEMM)
    for (op, rowwise) in [("per_group_colwise", false), ("per_group_rowwise", true)] {
        if !b.enabled(op) {
            continue;
        }
        let shapes = if rowwise {
            [(H, MTOK), (I, MTOK)]
        } else {
            [(MTOK, H), (MTOK, I)]
        };
        for (m, k) in shapes {
            let scales = E * if rowwise { m } else { k };
            for (name, offs) in routings {
                b.case(
                    op,
                    format!("({m},{k})"),
                    name,
                    (3 * m * k + 4 * scales) as u64,
                    |c, s| {
                        let (x, offs, o, sc) = (xs(m * k), offs.src(), out.dst(), sc.dst());
                        if rowwise {
                            c.per_group_rowwise(&p, m, k, x, offs, o, sc, s)
                        } else {
                            c.per_group_colwise(&p, m, k, x, offs, o, sc, s)
                        }
                    },
                );
            }
        }
    }
    for (op, padded) in [
        ("per_group_colwise_dual", false),
        ("per_group_colwise_dual_padded", true),
    ] {
        if !b.enabled(op) {
            continue;
        }
        let (k1, k2) = (I, H);
        // rows of each output: the padded op writes whole 16-row groups
        let cap = if padded {
            (MTOK + 15 * E).next_multiple_of(16)
        } else {
            MTOK
        };
        // minimal bytes: inputs read once, the whole (padded) outputs written once
        let bytes = 2 * MTOK * (k1 + k2) + cap * (k1 + k2) + 4 * E * (k1 + k2);
        for (name, offs) in routings {
            b.case(
                op,
                format!("({MTOK},{k1})+({MTOK},{k2})"),
                name,
                bytes as u64,
                |c, s| {
                    let (x1, x2, offs) = (xs(MTOK * k1), xs2(MTOK * k2), offs.src());
                    let (s1, s2) = (sc.dst(), sc2.dst());
                    if padded {
                        let (o1, o2) = (out2.dst_range(0..cap * k1)?, out.dst_range(0..cap * k2)?);
                        let po = poffs.dst_range(0..E)?;
                        c.per_group_colwise_dual_padded(
                            &p, MTOK, k1, k2, cap, x1, x2, offs, o1, s1, o2, s2, po, s,
                        )
                    } else {
                        let (o1, o2) = (out.dst(), out2.dst());
                        c.per_group_colwise_dual(&p, MTOK, k1, k2, x1, x2, offs, o1, s1, o2, s2, s)
                    }
                },
            );
        }
    }
    for (op, transpose) in [("colwise_3d", false), ("rowwise_3d_transpose_rhs", true)] {
        if !b.enabled(op) {
            continue;
        }
        for (k, n) in [(H, I), (I, H)] {
            let scales = E * if transpose { k } else { n };
            b.case(
                op,
                format!("({E},{k},{n})"),
                "",
                (3 * E * k * n + 4 * scales) as u64,
                |c, s| {
                    let (x, o, sc) = (xs(E * k * n), out.dst(), sc.dst());
                    if transpose {
                        c.rowwise_3d_transpose_rhs(&p, E, k, n, x, o, sc, s)
                    } else {
                        c.colwise_3d(&p, E, k, n, x, o, sc, s)
                    }
                },
            );
        }
    }
    // ---- the fused MoE casts (hip/moe): minimal bytes = inputs read once, both outputs
    // written once; compare with the rows of the casts each one replaces
    if b.section("moe_") {
        let p = hipfp8::MoeCastParams::from(p);
        let mut o1 = DeviceBuffer::<u8>::alloc(&b.ctx, E * H * I).unwrap();
        let mut o2 = DeviceBuffer::<u8>::alloc(&b.ctx, E * H * I).unwrap();
        fn dual<'a>(
            o1: &'a mut DeviceBuffer<u8>,
            o2: &'a mut DeviceBuffer<u8>,
            sc: &'a mut DeviceBuffer<f32>,
            sc2: &'a mut DeviceBuffer<f32>,
        ) -> hipfp8::moe::DualOut<'a> {
            hipfp8::moe::DualOut {
                out: o1.dst(),
                scales: sc.dst(),
                out_col: o2.dst(),
                scales_col: sc2.dst(),
            }
        }
        if b.enabled("moe_weights_dual") {
            for (k, n) in [(H, I), (I, H)] {
                let bytes = 4 * E * k * n + 4 * E * (k + n);
                b.case(
                    "moe_weights_dual",
                    format!("({E},{k},{n})"),
                    "",
                    bytes as u64,
                    |c, s| {
                        c.moe_weights_dual(
                            &p,
                            E,
                            k,
                            n,
                            xs(E * k * n),
                            o1.dst(),
                            sc.dst(),
                            o2.dst(),
                            sc2.dst(),
                            s,
                        )
                    },
                );
            }
            // the same bytes from two sources (w1 | w3): the halves of (E, H, I)
            let (k, n) = (H, I);
            b.case(
                "moe_weights_dual_halves",
                format!("({E},{k},{n})"),
                "",
                (4 * E * k * n + 4 * E * (k + n)) as u64,
                |c, s| {
                    let (h0, h1) = (xs(E * k * n / 2), xs2(E * k * n / 2));
                    let (a, b) = (o1.dst(), o2.dst());
                    c.moe_weights_dual_halves(&p, E, k, n, h0, h1, a, sc.dst(), b, sc2.dst(), s)
                },
            );
        }
        for (name, offs) in routings {
            if b.enabled("moe_act_dual") {
                for k in [H, I] {
                    let bytes = 4 * MTOK * k + 4 * MTOK + 4 * E * k;
                    b.case(
                        "moe_act_dual",
                        format!("({MTOK},{k})"),
                        name,
                        bytes as u64,
                        |c, s| {
                            let d = dual(&mut o1, &mut o2, &mut sc, &mut sc2);
                            c.moe_act_dual(&p, MTOK, k, xs(MTOK * k), offs.src(), d, s)
                        },
                    );
                }
            }
            for (op, bwd) in [("moe_swiglu_quant", false), ("moe_swiglu_bwd_quant", true)] {
                if !b.enabled(op) {
                    continue;
                }
                let bytes = if bwd {
                    2 * MTOK * I + 4 * MTOK * I + 4 * MTOK * I + 4 * MTOK + 8 * E * I
                } else {
                    4 * MTOK * I + 2 * MTOK * I + 4 * MTOK + 4 * E * I
                };
                b.case(
                    op,
                    format!("({MTOK},{})", 2 * I),
                    name,
                    bytes as u64,
                    |c, s| {
                        let d = dual(&mut o1, &mut o2, &mut sc, &mut sc2);
                        let (h, offs) = (xs(MTOK * 2 * I), offs.src());
                        if bwd {
                            c.moe_swiglu_bwd_quant(&p, MTOK, I, xs2(MTOK * I), h, offs, d, s)
                        } else {
                            c.moe_swiglu_quant(&p, MTOK, I, h, offs, d, s)
                        }
                    },
                );
            }
        }
    }
    // ---- the MoE routing ops (hip/route): T tokens, top-8 of E experts, hidden H, groups padded
    // to 16 (the DeepSeek-V3 layer of BENCHMARKS.md); minimal bytes: each token row read once,
    // each output written once (the padded rows as the routing pads them)
    let route_ops = [
        "moe_dispatch_dual",
        "moe_combine_bwd_dual",
        "moe_combine",
        "moe_combine_bwd_scores",
    ];
    if route_ops.iter().any(|op| b.enabled(op)) {
        const TOPK: usize = 8;
        const T: usize = MTOK / TOPK;
        let m = T * TOPK;
        let m_cap = m + 15 * E;
        // Routing permutations: "balanced" and "zipf" as a router makes them (each slot sent to
        // an expert, the group sizes of the routing, then a stable sort of the slots by expert:
        // within a group the slots, so the tokens, ascend, as torchtitan's argsort and
        // hipfp8.torch.routed give them); "balanced-strided" keeps the balanced groups with the
        // slots in a fixed strided order (7919 is prime, so coprime with m = 2^15): no two rows
        // of a group near in tokens, the gathers' worst case for the cache.
        let strided: Vec<i32> = (0..m).map(|i| ((i * 7919) % m) as i32).collect();
        let w: Vec<f32> = (0..m).map(|i| 0.05 + (i % 17) as f32 * 0.01).collect();
        let dw = DeviceBuffer::from_host(&b.ctx, &w).unwrap();
        let mut slot_row = DeviceBuffer::<i32>::alloc(&b.ctx, m).unwrap();
        let mut comb = DeviceBuffer::<bf16>::alloc(&b.ctx, T * H).unwrap();
        let mut dws = DeviceBuffer::<f32>::alloc(&b.ctx, m).unwrap();
        let mp = hipfp8::MoeCastParams::from(p);
        let ds = DispatchShape {
            t: T,
            k: H,
            topk: TOPK,
            align: 16,
            m_cap,
        };
        let cs = CombineShape {
            t: T,
            k: H,
            topk: TOPK,
            m_cap,
        };
        let shape = format!("({T},{H}) top{TOPK} of {E}");
        let route_cases = [
            ("balanced", &doffs_bal, false),
            ("zipf", &doffs_zipf, false),
            ("balanced-strided", &doffs_bal, true),
        ];
        for (name, offs, is_strided) in route_cases {
            let sizes = if name == "zipf" {
                zipf_sizes(m, E)
            } else {
                vec![m / E; E]
            };
            let sorted;
            let perm = if is_strided {
                &strided
            } else {
                sorted = sorted_routing(&sizes);
                &sorted
            };
            let dperm = DeviceBuffer::from_host(&b.ctx, perm).unwrap();
            let mpad: usize = sizes.iter().map(|v| v.div_ceil(16) * 16).sum();
            for (op, weighted) in [("moe_dispatch_dual", false), ("moe_combine_bwd_dual", true)] {
                // the combine rows below need the slot rows of a dispatch of this routing
                let first = !weighted;
                if !b.enabled(op) && !first {
                    continue;
                }
                let bytes = 2 * T * H + 2 * mpad * H + 4 * mpad + 4 * E * H + 8 * m + 4 * m;
                let mut run = |c: &Context, st: StreamRef| {
                    let (o1, o2) = out.dst_range(0..2 * m_cap * H)?.split_at(m_cap * H);
                    let (po, sr) = (poffs.dst_range(0..E)?, slot_row.dst());
                    let (x, pm, of) = (xs(T * H), dperm.src(), offs.src());
                    let (s1, s2) = (sc.dst(), sc2.dst());
                    match weighted {
                        true => c.moe_combine_bwd_dual(
                            &mp,
                            ds,
                            x,
                            dw.src(),
                            pm,
                            of,
                            po,
                            sr,
                            o1,
                            s1,
                            o2,
                            s2,
                            st,
                        ),
                        false => {
                            c.moe_dispatch_dual(&mp, ds, x, pm, of, po, sr, o1, s1, o2, s2, st)
                        }
                    }
                };
                if b.enabled(op) {
                    b.case(op, shape.clone(), name, bytes as u64, &mut run);
                } else {
                    run(&b.ctx, b.stream.handle()).unwrap();
                }
            }
            // y (m_cap, H) in the padded layout, read through the dispatch's slot rows
            let y = || HpSrc::Bf16(dx.src_range(0..m_cap * H).unwrap());
            if b.enabled("moe_combine") {
                let bytes = 2 * m * H + 8 * m + 2 * T * H;
                b.case("moe_combine", shape.clone(), name, bytes as u64, |c, st| {
                    let (sr, w, o) = (slot_row.src(), dw.src(), comb.dst());
                    c.moe_combine(&NoParams, cs, y(), sr, w, o, st)
                });
            }
            if b.enabled("moe_combine_bwd_scores") {
                let bytes = 2 * T * H + 2 * m * H + 8 * m;
                b.case(
                    "moe_combine_bwd_scores",
                    shape.clone(),
                    name,
                    bytes as u64,
                    |c, st| {
                        let (dout, sr) = (xs2(T * H), slot_row.src());
                        c.moe_combine_bwd_scores(&NoParams, cs, dout, y(), sr, dws.dst(), st)
                    },
                );
            }
        }
    }
    if b.enabled("rowwise_2d_padded") {
        for (name, offs) in routings {
            let (m, k) = (MTOK, H);
            let cap = m + 15 * E;
            // minimal bytes: every input row read once, every padded output row written once
            let mpad: usize = if name == "zipf" {
                zipf_sizes(m, E).iter().map(|s| s.div_ceil(16) * 16).sum()
            } else {
                m
            };
            b.case(
                "rowwise_2d_padded",
                format!("({m},{k})"),
                name,
                (2 * m * k + mpad * k + 4 * mpad) as u64,
                |c, s| {
                    c.rowwise_2d_padded(
                        &p,
                        m,
                        k,
                        cap,
                        xs(m * k),
                        offs.src(),
                        out.dst(),
                        sc.dst(),
                        poffs.dst_range(0..E).unwrap(),
                        s,
                    )
                },
            );
        }
    }
    // ---- dense Llama3-8B (M = 8192)
    if b.enabled("tensorwise") {
        for (m, k) in [(8192usize, 4096usize), (8192, 14336)] {
            b.case(
                "tensorwise",
                format!("({m},{k})"),
                "",
                (3 * m * k + 8) as u64,
                |c, s| c.tensorwise(&p, m * k, xs(m * k), out.dst(), sc.dst(), amax.dst(), s),
            );
        }
    }
    if b.enabled("cast_transpose") {
        for (m, k) in [(8192usize, 4096usize), (8192, 14336)] {
            for (name, scaling) in [
                ("tensorwise", Scaling::Tensorwise),
                ("rowwise", Scaling::Rowwise),
            ] {
                let ns = if name == "rowwise" { m + k } else { 2 };
                b.case(
                    &format!("cast_transpose_{name}"),
                    format!("({m},{k})"),
                    "",
                    (4 * m * k + 4 * ns) as u64,
                    |c, s| {
                        c.cast_transpose(
                            &p,
                            scaling,
                            m,
                            k,
                            xs(m * k),
                            out.dst(),
                            out2.dst(),
                            sc.dst(),
                            sc2.dst(),
                            s,
                        )
                    },
                );
            }
        }
    }
    // Delayed scaling: the caller's scale (here the one the exact-amax op derives for the same
    // tensor, so the codes are the usual ones), one read of x.
    let (tws, cts) = (
        b.enabled("tensorwise_scaled"),
        b.enabled("cast_transpose_scaled"),
    );
    if tws || cts {
        let pg = CastParams::new(Fp8Format::E4M3Fn, false);
        let mut given = DeviceBuffer::<f32>::alloc(&b.ctx, 1).unwrap();
        for (m, k) in [(8192usize, 4096usize), (8192, 14336)] {
            b.ctx
                .tensorwise(
                    &pg,
                    m * k,
                    xs(m * k),
                    out.dst(),
                    given.dst(),
                    amax.dst(),
                    StreamRef::DEFAULT,
                )
                .unwrap();
            if tws {
                b.case(
                    "tensorwise_scaled",
                    format!("({m},{k})"),
                    "",
                    (3 * m * k + 8) as u64,
                    |c, s| {
                        c.tensorwise_scaled(
                            &pg,
                            m * k,
                            xs(m * k),
                            given.src(),
                            out.dst(),
                            amax.dst(),
                            s,
                        )
                    },
                );
            }
            if !cts {
                continue;
            }
            b.case(
                "cast_transpose_scaled",
                format!("({m},{k})"),
                "",
                (4 * m * k + 8) as u64,
                |c, s| {
                    c.cast_transpose_scaled(
                        &pg,
                        m,
                        k,
                        xs(m * k),
                        given.src(),
                        out.dst(),
                        out2.dst(),
                        amax.dst(),
                        s,
                    )
                },
            );
        }
    }
    // ---- DeepSeek-V3 blockwise and MXFP8
    if b.enabled("blockwise") {
        let (m, k) = (MTOK, H);
        b.case(
            "blockwise_1x128",
            format!("({m},{k})"),
            "",
            (3 * m * k + 4 * m * k / 128) as u64,
            |c, s| c.blockwise_1x128(&p, m, k, xs(m * k), out.dst(), sc.dst(), s),
        );
        b.case(
            "blockwise_128x128",
            format!("({m},{k})"),
            "",
            (3 * m * k + 4 * (m / 128) * (k / 128)) as u64,
            |c, s| c.blockwise_128x128(&p, m, k, xs(m * k), out.dst(), sc.dst(), s),
        );
    }
    if b.enabled("mxfp8") {
        let (m, k) = (MTOK, H);
        for (name, r) in [("floor", MxRounding::Floor), ("rceil", MxRounding::Rceil)] {
            let mp = MxParams::new(Fp8Format::E4M3Fn, r);
            for dim in [0, 1] {
                b.case(
                    &format!("mxfp8_dim{dim}_{name}"),
                    format!("({m},{k})"),
                    "",
                    (3 * m * k + m * k / 32) as u64,
                    |c, s| {
                        let (x, o, e8) = (xs(m * k), out.dst(), e8.dst());
                        if dim == 1 {
                            c.mxfp8_dim1(&mp, m, k, x, o, e8, s)
                        } else {
                            c.mxfp8_dim0(&mp, m, k, x, o, e8, s)
                        }
                    },
                );
            }
        }
    }
    println!("bench done in {:.1} s", t0.elapsed().as_secs_f64());

    if let Some(path) = json {
        let mut s = String::from("[\n");
        for (i, r) in b.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {{\"op\": \"{}\", \"shape\": \"{}\", \"groups\": \"{}\", \"us\": {:.3}, \"bytes\": {}, \"gbps\": {:.1}, \"pct_copy\": {:.2}, \"copy_gbps\": {:.1}}}{}",
                r.op,
                r.shape,
                r.groups,
                r.us,
                r.bytes,
                r.gbps,
                r.pct_copy,
                b.copy_gbps,
                if i + 1 < b.rows.len() { "," } else { "" }
            );
        }
        s.push_str("]\n");
        std::fs::write(&path, s).unwrap();
        println!("wrote {path}");
    }
}
