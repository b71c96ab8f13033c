//! CUDA/HIP graph capture and stream concurrency of the ops (issue 13's workspace design,
//! src/workspace.rs): per-stream scratch, no event recorded outside a capture is ever waited on.
//!
//! - `moe_fwd_bwd_captured_on_a_fresh_stream`: the grouped-mm training step of one MoE
//!   projection (rowwise_2d, colwise_3d, grouped GEMM 2Dx3D; rowwise_2d of grad_out,
//!   rowwise_3d_transpose_rhs, grouped GEMM 2Dx3D; per_group_colwise_dual, grouped GEMM 2Dx2D)
//!   run eagerly on one stream, then captured on a stream that never ran anything
//!   (caller-provided workspaces), replayed with new data AND new offsets, compared bit for
//!   bit with eager calls.
//! - `every_other_op_captured_after_warmup`: every other op captured on a fresh stream warmed
//!   by one eager pass (the cached per-stream workspace), replayed with new data, compared.
//! - `two_streams_run_column_casts_concurrently`: column casts and cast_transpose queued on two
//!   streams at once, each compared with its eager single-stream result.
//! - `graph_outlives_workspace_growth`: a cast captured with the stream's cached workspace,
//!   then a larger eager call on the same stream grows that workspace (the old buffer is
//!   retired, not freed), new allocations are filled with garbage, and the graph's replays
//!   still equal eager calls.
//!
//! GPU tests: they skip (printing why) without a GPU and fail on a wrong result with one.

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
use hipfp8::{
    CastParams, Context, Dst, Fp8Format, GemmParams, GroupedOp, HpSrc, Loc, MxParams, MxRounding,
    Scaling, Src, StreamRef, Workspace, bf16,
};

/// Device buffers addressed by index, viewed with any element type (test code: the views'
/// lifetimes are not tied to the bank).
struct Bank {
    bufs: Vec<DeviceBuffer<u8>>,
}

impl Bank {
    fn new() -> Bank {
        Bank { bufs: Vec::new() }
    }
    fn add<T>(&mut self, ctx: &Context, len: usize) -> Buf<T> {
        let b = DeviceBuffer::<u8>::zeroed(ctx, len * std::mem::size_of::<T>()).unwrap();
        self.bufs.push(b);
        let ptr = self.bufs.last_mut().unwrap().as_mut_ptr() as usize;
        Buf {
            ptr,
            len,
            idx: self.bufs.len() - 1,
            _t: std::marker::PhantomData,
        }
    }
    /// Fill the buffers from index `from` on (the outputs) with `byte`.
    fn fill(&mut self, from: usize, byte: u8) {
        for b in &mut self.bufs[from..] {
            b.fill_bytes(byte).unwrap();
        }
        sync_legacy();
    }
    fn snapshot(&self, from: usize) -> Vec<Vec<u8>> {
        self.bufs[from..]
            .iter()
            .map(|b| b.to_vec().unwrap())
            .collect()
    }
    fn upload<T: Copy>(&mut self, b: &Buf<T>, data: &[T]) {
        assert_eq!(data.len(), b.len);
        // SAFETY: plain data viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data))
        };
        self.bufs[b.idx].copy_from_host(bytes).unwrap();
        sync_legacy();
    }
}

struct Buf<T> {
    ptr: usize,
    len: usize,
    idx: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T> Clone for Buf<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Buf<T> {}

impl<T> Buf<T> {
    fn src(&self) -> Src<'static, T> {
        // SAFETY: device memory of the bank, alive for the whole test.
        unsafe { Src::from_raw(self.ptr as *const T, self.len, Loc::Device) }
    }
    fn dst(&self) -> Dst<'static, T> {
        // SAFETY: as `src`; each call's outputs are distinct buffers.
        unsafe { Dst::from_raw(self.ptr as *mut T, self.len, Loc::Device) }
    }
}

impl Buf<bf16> {
    fn hp(&self) -> HpSrc<'static> {
        HpSrc::Bf16(self.src())
    }
}

/// Memsets and copies without a stream go to the legacy default stream, which non-blocking
/// streams do not wait for: finish them before queuing work that reads the memory.
fn sync_legacy() {
    Stream::default_stream().synchronize().unwrap();
}

/// Deterministic bf16 values in [-8, 8) with varied magnitudes.
fn values(n: usize, seed: u64) -> Vec<bf16> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let scale = [0.01, 0.5, 1.0, 8.0][(s & 3) as usize];
            bf16::from_f64((u * 2.0 - 1.0) * scale)
        })
        .collect()
}

/// Every output buffer of `got` equals `want`'s (`what` names the two runs compared).
fn assert_outputs_eq(got: &[Vec<u8>], want: &[Vec<u8>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            a == b,
            "output {i} differs: {what} (first byte {:?})",
            a.iter().zip(b).position(|(x, y)| x != y)
        );
    }
}

fn capture(ctx: &Context, stream: &Stream, f: impl FnOnce(StreamRef)) -> hipfp8::Graph {
    let _ = ctx;
    stream.begin_capture().unwrap();
    f(stream.handle());
    assert!(stream.is_capturing().unwrap());
    stream.end_capture().unwrap()
}

const E: usize = 4;
const M: usize = 512;
const K: usize = 256;
const N: usize = 384;

struct Moe {
    x: Buf<bf16>,
    w: Buf<bf16>,
    go: Buf<bf16>,
    offs: Buf<i32>,
    first_out: usize,
    xq: Buf<u8>,
    xs: Buf<f32>,
    wq: Buf<u8>,
    wsc: Buf<f32>,
    y: Buf<bf16>,
    gq: Buf<u8>,
    gs: Buf<f32>,
    wtq: Buf<u8>,
    wts: Buf<f32>,
    dx: Buf<bf16>,
    goc: Buf<u8>,
    gocs: Buf<f32>,
    xc: Buf<u8>,
    xcs: Buf<f32>,
    dw: Buf<bf16>,
}

impl Moe {
    fn new(ctx: &Context, bank: &mut Bank) -> Moe {
        let (x, w, go, offs) = (
            bank.add(ctx, M * K),
            bank.add(ctx, E * K * N),
            bank.add(ctx, M * N),
            bank.add(ctx, E),
        );
        let first_out = bank.bufs.len();
        Moe {
            x,
            w,
            go,
            offs,
            first_out,
            xq: bank.add(ctx, M * K),
            xs: bank.add(ctx, M),
            wq: bank.add(ctx, E * K * N),
            wsc: bank.add(ctx, E * N),
            y: bank.add(ctx, M * N),
            gq: bank.add(ctx, M * N),
            gs: bank.add(ctx, M),
            wtq: bank.add(ctx, E * K * N),
            wts: bank.add(ctx, E * K),
            dx: bank.add(ctx, M * K),
            goc: bank.add(ctx, M * N),
            gocs: bank.add(ctx, E * N),
            xc: bank.add(ctx, M * K),
            xcs: bank.add(ctx, E * K),
            dw: bank.add(ctx, E * N * K),
        }
    }

    /// One training step of the projection: forward, dgrad, wgrad.
    fn step(&self, ctx: &Context, g: &GemmParams, s: StreamRef) {
        let p = CastParams::new(Fp8Format::E4M3Fn, true);
        ctx.rowwise_2d(&p, M, K, self.x.hp(), self.xq.dst(), self.xs.dst(), s)
            .unwrap();
        ctx.colwise_3d(&p, E, K, N, self.w.hp(), self.wq.dst(), self.wsc.dst(), s)
            .unwrap();
        // The forward GEMM (x . w) and the dgrad GEMM (grad_out . w^T) have the same form.
        let gemm = |kk, nn, a: Buf<u8>, b: Buf<u8>, sa: Buf<f32>, sb: Buf<f32>, out: Buf<bf16>| {
            ctx.grouped_gemm_2d3d(
                g,
                M,
                kk,
                nn,
                E,
                a.src(),
                b.src(),
                self.offs.src(),
                sa.src(),
                sb.src(),
                out.dst(),
                s,
            )
            .unwrap()
        };
        gemm(K, N, self.xq, self.wq, self.xs, self.wsc, self.y);
        ctx.rowwise_2d(&p, M, N, self.go.hp(), self.gq.dst(), self.gs.dst(), s)
            .unwrap();
        ctx.rowwise_3d_transpose_rhs(&p, E, K, N, self.w.hp(), self.wtq.dst(), self.wts.dst(), s)
            .unwrap();
        gemm(N, K, self.gq, self.wtq, self.gs, self.wts, self.dx);
        ctx.per_group_colwise_dual(
            &p,
            M,
            N,
            K,
            self.go.hp(),
            self.x.hp(),
            self.offs.src(),
            self.goc.dst(),
            self.gocs.dst(),
            self.xc.dst(),
            self.xcs.dst(),
            s,
        )
        .unwrap();
        ctx.grouped_gemm_2d2d(
            g,
            N,
            M,
            K,
            self.goc.src(),
            self.xc.src(),
            self.offs.src(),
            self.gocs.src(),
            self.xcs.src(),
            self.dw.dst(),
            s,
        )
        .unwrap();
    }

    fn upload(&self, bank: &mut Bank, seed: u64, offs: &[i32]) {
        bank.upload(&self.x, &values(M * K, seed));
        bank.upload(&self.w, &values(E * K * N, seed + 1));
        bank.upload(&self.go, &values(M * N, seed + 2));
        bank.upload(&self.offs, offs);
    }
}

#[test]
fn moe_fwd_bwd_captured_on_a_fresh_stream() {
    let Some(ctx) = gpu_for_tests("moe_fwd_bwd_captured_on_a_fresh_stream") else {
        return;
    };
    let mut bank = Bank::new();
    let moe = Moe::new(&ctx, &mut bank);
    let offs_a = [128, 256, 384, 512];
    let offs_b = [100, 100, 333, 497]; // an empty group, unaligned starts, rows past the end
    // A stream that never ran anything: caller-provided workspaces for the casts (bound to
    // the stream) and the GEMMs (GemmParams::workspace).
    let cap = Stream::new_non_blocking(&ctx).unwrap();
    let gp = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn);
    let ws_bytes = [
        ctx.colwise_workspace_size(E, K, 0).unwrap(),
        ctx.colwise_workspace_size(E, N, K).unwrap(),
    ]
    .into_iter()
    .max()
    .unwrap();
    let cast_ws = DeviceBuffer::<u8>::zeroed(&ctx, ws_bytes).unwrap();
    // The 2D x 3D GEMMs' bytes and the 2D x 2D one's with its staging area (a smaller caller
    // workspace is refused: the implementation never depends on the workspace).
    let wgrad = GroupedOp::TwoD2D { n: N, mt: M, k: K };
    let gemm_bytes = ctx
        .grouped_gemm_workspace_size(&gp, E)
        .unwrap()
        .max(ctx.grouped_gemm_op_workspace_size(&gp, wgrad, E).unwrap())
        .max(1);
    let gemm_ws = DeviceBuffer::<u8>::zeroed(&ctx, gemm_bytes).unwrap();
    sync_legacy();
    // SAFETY: device buffers of this context, alive until the end of the test, zeroed, used
    // by nothing else.
    let (cws, gws) = unsafe {
        (
            Workspace::from_raw(cast_ws.as_ptr() as *mut _, cast_ws.len()),
            Workspace::from_raw(gemm_ws.as_ptr() as *mut _, gemm_ws.len()),
        )
    };
    // SAFETY: as above.
    unsafe { ctx.bind_stream_workspace(cap.handle(), cws).unwrap() };
    let gp_cap = gp.with_workspace(gws);
    // The trainer's situation: eager steps ran on another stream first (that stream's cached
    // workspaces are warm and were last used there), then the step is captured on `cap`.
    let eager = Stream::new_non_blocking(&ctx).unwrap();
    moe.upload(&mut bank, 99, &offs_a);
    moe.step(&ctx, &gp, eager.handle());
    eager.synchronize().unwrap();
    let graph = capture(&ctx, &cap, |s| moe.step(&ctx, &gp_cap, s));

    for (round, (seed, offs)) in [(1u64, &offs_a), (7, &offs_b), (13, &offs_a)]
        .into_iter()
        .enumerate()
    {
        bank.fill(moe.first_out, 0xA5);
        moe.upload(&mut bank, seed, offs);
        graph.launch(&cap).unwrap();
        cap.synchronize().unwrap();
        let replayed = bank.snapshot(moe.first_out);
        bank.fill(moe.first_out, 0xA5); // the same fill: rows past the last offset stay as they are
        moe.step(&ctx, &gp, eager.handle());
        eager.synchronize().unwrap();
        let direct = bank.snapshot(moe.first_out);
        assert_outputs_eq(
            &replayed,
            &direct,
            &format!(
                "round {round} (offsets {offs:?}): the MoE step's graph replay vs eager calls"
            ),
        );
        // The outputs were really written (not left at the fill pattern).
        assert!(replayed.iter().all(|o| o.iter().any(|&v| v != 0xA5)));
    }
    drop(graph);
    ctx.unbind_stream_workspace(cap.handle());
    println!("HIPFP8_GPU_CHECK moe_fwd_bwd graph == eager for 3 rounds of new data and offsets");
}

const OM: usize = 384;
const OK: usize = 320;
const OG: usize = 3;

#[test]
fn every_other_op_captured_after_warmup() {
    let Some(ctx) = gpu_for_tests("every_other_op_captured_after_warmup") else {
        return;
    };
    let mut bank = Bank::new();
    let x = bank.add::<bf16>(&ctx, OM * OK);
    let offs_m = bank.add::<i32>(&ctx, OG);
    let offs_k = bank.add::<i32>(&ctx, OG);
    let scale = bank.add::<f32>(&ctx, 1);
    let first = bank.bufs.len();
    let m_cap = OM + 15 * OG;
    let o = [(); 17].map(|_| bank.add::<u8>(&ctx, m_cap * OK));
    let f = [(); 16].map(|_| bank.add::<f32>(&ctx, OM * OK.div_ceil(32) + OG * (OM + OK) + m_cap));
    let po = bank.add::<i32>(&ctx, OG);
    let step = |s: StreamRef| {
        let p = CastParams::new(Fp8Format::E4M3Fn, true);
        let p0 = CastParams::new(Fp8Format::E5M2, false);
        let mp = MxParams::new(Fp8Format::E4M3Fn, MxRounding::Rceil);
        let n = OM * OK;
        let r = |b: Buf<u8>, len| Buf { len, ..b };
        let rf = |b: Buf<f32>, len| Buf { len, ..b };
        ctx.tensorwise(
            &p,
            n,
            x.hp(),
            r(o[0], n).dst(),
            rf(f[0], 1).dst(),
            rf(f[1], 1).dst(),
            s,
        )
        .unwrap();
        ctx.tensorwise_scaled(
            &p0,
            n,
            x.hp(),
            scale.src(),
            r(o[1], n).dst(),
            rf(f[2], 1).dst(),
            s,
        )
        .unwrap();
        for (i, sc) in [Scaling::Tensorwise, Scaling::Rowwise]
            .into_iter()
            .enumerate()
        {
            let (ns, nt) = if i == 0 { (1, 1) } else { (OM, OK) };
            ctx.cast_transpose(
                &p,
                sc,
                OM,
                OK,
                x.hp(),
                r(o[2 + 2 * i], n).dst(),
                r(o[3 + 2 * i], n).dst(),
                rf(f[3 + 2 * i], ns).dst(),
                rf(f[4 + 2 * i], nt).dst(),
                s,
            )
            .unwrap();
        }
        ctx.cast_transpose_scaled(
            &p0,
            OM,
            OK,
            x.hp(),
            scale.src(),
            r(o[6], n).dst(),
            r(o[7], n).dst(),
            rf(f[7], 1).dst(),
            s,
        )
        .unwrap();
        let nb1 = OM * OK.div_ceil(128);
        ctx.blockwise_1x128(&p, OM, OK, x.hp(), r(o[8], n).dst(), rf(f[8], nb1).dst(), s)
            .unwrap();
        let nb2 = OM.div_ceil(128) * OK.div_ceil(128);
        ctx.blockwise_128x128(&p, OM, OK, x.hp(), r(o[9], n).dst(), rf(f[9], nb2).dst(), s)
            .unwrap();
        let e0 = Buf::<u8> {
            len: OM * OK.div_ceil(32),
            ..o[15]
        };
        ctx.mxfp8_dim0(&mp, OM, OK, x.hp(), r(o[10], n).dst(), e0.dst(), s)
            .unwrap();
        let e1 = Buf::<u8> {
            len: OK * OM.div_ceil(32),
            ..o[16]
        };
        ctx.mxfp8_dim1(&mp, OM, OK, x.hp(), r(o[11], n).dst(), e1.dst(), s)
            .unwrap();
        ctx.per_group_rowwise(
            &p,
            OM,
            OK,
            x.hp(),
            offs_k.src(),
            r(o[12], n).dst(),
            rf(f[10], OG * OM).dst(),
            s,
        )
        .unwrap();
        ctx.per_group_colwise(
            &p,
            OM,
            OK,
            x.hp(),
            offs_m.src(),
            r(o[13], n).dst(),
            rf(f[11], OG * OK).dst(),
            s,
        )
        .unwrap();
        ctx.rowwise_2d_padded(
            &p,
            OM,
            OK,
            m_cap,
            x.hp(),
            offs_m.src(),
            r(o[14], m_cap * OK).dst(),
            rf(f[12], m_cap).dst(),
            po.dst(),
            s,
        )
        .unwrap();
    };
    let upload = |bank: &mut Bank, seed: u64, om: &[i32], ok: &[i32]| {
        bank.upload(&x, &values(OM * OK, seed));
        bank.upload(&offs_m, om);
        bank.upload(&offs_k, ok);
        bank.upload(&scale, &[0.75 + seed as f32]);
    };
    let cap = Stream::new_non_blocking(&ctx).unwrap();
    // Cold: a cast that needs scratch on a stream whose cache is empty is refused while the
    // stream is captured (growing would allocate), before anything is queued: the capture
    // stays valid and ends cleanly.
    upload(&mut bank, 0, &[100, 200, 384], &[64, 64, 320]);
    {
        let cold = Stream::new_non_blocking(&ctx).unwrap();
        cold.begin_capture().unwrap();
        let p = CastParams::new(Fp8Format::E4M3Fn, true);
        let r = ctx.per_group_colwise(
            &p,
            OM,
            OK,
            x.hp(),
            offs_m.src(),
            o[13].dst(),
            f[11].dst(),
            cold.handle(),
        );
        assert!(matches!(r, Err(hipfp8::Error::NotSupported(_))), "{r:?}");
        drop(cold.end_capture().unwrap());
    }
    // Warm-up: one eager pass on the capture stream sizes its cached workspace.
    upload(&mut bank, 0, &[100, 200, 384], &[64, 64, 320]);
    step(cap.handle());
    cap.synchronize().unwrap();
    let graph = capture(&ctx, &cap, step);
    let eager = Stream::new_non_blocking(&ctx).unwrap();
    for (round, (seed, om, ok)) in [
        (3u64, [100, 200, 384], [64, 64, 320]),
        (5, [0, 383, 384], [17, 200, 301]),
    ]
    .into_iter()
    .enumerate()
    {
        bank.fill(first, 0xA5);
        upload(&mut bank, seed, &om, &ok);
        graph.launch(&cap).unwrap();
        cap.synchronize().unwrap();
        let replayed = bank.snapshot(first);
        bank.fill(first, 0xA5); // the same fill: untouched rows and columns compare equal
        step(eager.handle());
        eager.synchronize().unwrap();
        let direct = bank.snapshot(first);
        assert_outputs_eq(
            &replayed,
            &direct,
            &format!("round {round}: graph replay vs eager calls"),
        );
    }
    println!(
        "HIPFP8_GPU_CHECK every other op: graph == eager for 2 rounds of new data and offsets"
    );
}

#[test]
fn two_streams_run_column_casts_concurrently() {
    let Some(ctx) = gpu_for_tests("two_streams_run_column_casts_concurrently") else {
        return;
    };
    let (m, k, g) = (2048usize, 1024usize, 8usize);
    let mut bank = Bank::new();
    let xs = [bank.add::<bf16>(&ctx, m * k), bank.add::<bf16>(&ctx, m * k)];
    let offs = bank.add::<i32>(&ctx, g);
    let first = bank.bufs.len();
    let outs = [
        (
            bank.add::<u8>(&ctx, m * k),
            bank.add::<f32>(&ctx, g * k),
            bank.add::<u8>(&ctx, m * k),
            bank.add::<u8>(&ctx, m * k),
            bank.add::<f32>(&ctx, m),
            bank.add::<f32>(&ctx, k),
        ),
        (
            bank.add::<u8>(&ctx, m * k),
            bank.add::<f32>(&ctx, g * k),
            bank.add::<u8>(&ctx, m * k),
            bank.add::<u8>(&ctx, m * k),
            bank.add::<f32>(&ctx, m),
            bank.add::<f32>(&ctx, k),
        ),
    ];
    bank.upload(&xs[0], &values(m * k, 21));
    bank.upload(&xs[1], &values(m * k, 22));
    let o: Vec<i32> = (1..=g as i32).map(|i| i * 250 - (i % 3) * 7).collect();
    let o: Vec<i32> = o.iter().map(|&v| v.min(m as i32)).collect();
    bank.upload(&offs, &o);
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    let run = |i: usize, s: StreamRef| {
        let (q, sc, ct, ctt, cs, cst) = outs[i];
        ctx.per_group_colwise(&p, m, k, xs[i].hp(), offs.src(), q.dst(), sc.dst(), s)
            .unwrap();
        ctx.cast_transpose(
            &p,
            Scaling::Rowwise,
            m,
            k,
            xs[i].hp(),
            ct.dst(),
            ctt.dst(),
            cs.dst(),
            cst.dst(),
            s,
        )
        .unwrap();
    };
    // Eager, one stream at a time (rows past the last offset are not written: the same fill
    // before every pass).
    bank.fill(first, 0xA5);
    let s1 = Stream::new_non_blocking(&ctx).unwrap();
    let s2 = Stream::new_non_blocking(&ctx).unwrap();
    run(0, s1.handle());
    s1.synchronize().unwrap();
    run(1, s1.handle());
    s1.synchronize().unwrap();
    let want = bank.snapshot(first);
    // Both streams at once, many rounds queued without synchronising.
    for _ in 0..3 {
        bank.fill(first, 0xA5);
        for _ in 0..8 {
            run(0, s1.handle());
            run(1, s2.handle());
        }
        s1.synchronize().unwrap();
        s2.synchronize().unwrap();
        let got = bank.snapshot(first);
        assert_outputs_eq(
            &got,
            &want,
            "two streams running column casts at once vs one",
        );
    }
    println!(
        "HIPFP8_GPU_CHECK two streams: per_group_colwise + cast_transpose concurrent == serial"
    );
}

#[test]
fn graph_outlives_workspace_growth() {
    let Some(ctx) = gpu_for_tests("graph_outlives_workspace_growth") else {
        return;
    };
    let (m, k) = (64usize, 96usize);
    let (bm, bk) = (2048usize, 2048usize);
    let mut bank = Bank::new();
    let x = bank.add::<bf16>(&ctx, m * k);
    let big_x = bank.add::<bf16>(&ctx, bm * bk);
    let big = [bank.add::<u8>(&ctx, bm * bk), bank.add::<u8>(&ctx, bm * bk)];
    let (big_s, big_st) = (bank.add::<f32>(&ctx, bm), bank.add::<f32>(&ctx, bk));
    let first = bank.bufs.len();
    let (o, ot) = (bank.add::<u8>(&ctx, m * k), bank.add::<u8>(&ctx, m * k));
    let (s, st) = (bank.add::<f32>(&ctx, m), bank.add::<f32>(&ctx, k));
    let p = CastParams::new(Fp8Format::E4M3Fn, false);
    let small = |stream: StreamRef| {
        ctx.cast_transpose(
            &p,
            Scaling::Rowwise,
            m,
            k,
            x.hp(),
            o.dst(),
            ot.dst(),
            s.dst(),
            st.dst(),
            stream,
        )
        .unwrap();
    };
    let cap = Stream::new_non_blocking(&ctx).unwrap();
    bank.upload(&x, &values(m * k, 1));
    small(cap.handle()); // warm-up: the stream's cached workspace, sized for the small call
    cap.synchronize().unwrap();
    let graph = capture(&ctx, &cap, small);
    // A larger call on the same stream, outside the capture: its workspace grows.
    bank.upload(&big_x, &values(bm * bk, 2));
    ctx.cast_transpose(
        &p,
        Scaling::Rowwise,
        bm,
        bk,
        big_x.hp(),
        big[0].dst(),
        big[1].dst(),
        big_s.dst(),
        big_st.dst(),
        cap.handle(),
    )
    .unwrap();
    cap.synchronize().unwrap();
    // Fresh allocations filled with garbage: memory a freed workspace would have handed back.
    let mut spoilers = Vec::new();
    for _ in 0..64 {
        let mut b = DeviceBuffer::<u8>::zeroed(&ctx, 4096).unwrap();
        b.fill_bytes(0x7F).unwrap();
        spoilers.push(b);
    }
    sync_legacy();
    let eager = Stream::new_non_blocking(&ctx).unwrap();
    for (round, seed) in [3u64, 4, 5].into_iter().enumerate() {
        bank.upload(&x, &values(m * k, seed));
        bank.fill(first, 0xA5);
        graph.launch(&cap).unwrap();
        cap.synchronize().unwrap();
        let replayed = bank.snapshot(first);
        bank.fill(first, 0xA5);
        small(eager.handle());
        eager.synchronize().unwrap();
        let direct = bank.snapshot(first);
        assert_outputs_eq(
            &replayed,
            &direct,
            &format!(
                "round {round}: replay of a graph captured before its stream's workspace grew \
                 vs an eager call"
            ),
        );
    }
    drop(spoilers);
    println!(
        "HIPFP8_GPU_CHECK graph after workspace growth: 3 replays == eager (rowwise cast_transpose)"
    );
}
