//! The harness of the GPU == CPU suites (`gpu_quant`, `gpu_cast_mx`): test tensors on the
//! device, output buffers run on both backends from the same sentinel, and their comparison
//! over the whole buffer (so an element written by one backend and not the other is caught).
//! Views may start `skew` elements into their buffer, which sends kernels down their
//! unaligned paths.

use hipfp8::device::{DeviceBuffer, DeviceCopy, Stream};
use hipfp8::{CastParams, Context, Dst, Fp8Format, HpSrc, Scaling, StreamRef, bf16};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{Fill, SENT_F32, SENT_U8, Tensor, fill_strategy, fmt_strategy, same_bits};

/// A test tensor on the device, optionally starting `skew` elements into its buffer.
pub enum DevHp {
    B(DeviceBuffer<bf16>, usize, usize),
    F(DeviceBuffer<f32>, usize, usize),
}

impl DevHp {
    pub fn new(ctx: &Context, t: &Tensor, skew: usize) -> DevHp {
        let n = t.vals.len();
        match &t.b {
            Some(b) => {
                let mut h = vec![bf16::from_f32(0.0); skew];
                h.extend_from_slice(b);
                DevHp::B(DeviceBuffer::from_host(ctx, &h).unwrap(), skew, n)
            }
            None => {
                let mut h = vec![0.0f32; skew];
                h.extend_from_slice(&t.vals);
                DevHp::F(DeviceBuffer::from_host(ctx, &h).unwrap(), skew, n)
            }
        }
    }
    pub fn hp(&self) -> HpSrc<'_> {
        match self {
            DevHp::B(b, s, n) => HpSrc::Bf16(b.src_range(*s..*s + *n).unwrap()),
            DevHp::F(b, s, n) => HpSrc::F32(b.src_range(*s..*s + *n).unwrap()),
        }
    }
}

/// An output buffer pair (host for the CPU run, device for the GPU run), both pre-filled with
/// the same sentinel, 7 elements longer than the op needs, the op's view starting at `skew`.
pub struct Out<T: DeviceCopy + PartialEq + std::fmt::Debug> {
    pub host: Vec<T>,
    dev: DeviceBuffer<T>,
    skew: usize,
    len: usize,
}

impl<T: DeviceCopy + PartialEq + std::fmt::Debug> Out<T> {
    pub fn new(ctx: &Context, len: usize, sentinel: T, skew: usize) -> Out<T> {
        let host = vec![sentinel; len + skew + 7];
        let dev = DeviceBuffer::from_host(ctx, &host).unwrap();
        Out {
            host,
            dev,
            skew,
            len,
        }
    }
    /// The view the CPU run writes.
    pub fn cpu(&mut self) -> Dst<'_, T> {
        (&mut self.host[self.skew..self.skew + self.len]).into()
    }
    /// The view the GPU run writes.
    pub fn gpu(&mut self) -> Dst<'_, T> {
        self.dev.dst_range(self.skew..self.skew + self.len).unwrap()
    }
    /// The whole device buffer, copied to the host.
    pub fn gpu_host(&self) -> Vec<T> {
        self.dev.to_vec().unwrap()
    }
}

/// The whole device buffer equals the host one under `eq`; else a failure naming `what`, how
/// many `unit` differ and the first difference (`show` formats an element).
fn check_by<T: DeviceCopy + PartialEq + std::fmt::Debug>(
    what: &str,
    o: &Out<T>,
    unit: &str,
    eq: impl Fn(&T, &T) -> bool,
    show: impl Fn(&T) -> String,
) -> Result<(), TestCaseError> {
    let g = o.gpu_host();
    let bad: Vec<usize> = (0..g.len()).filter(|&i| !eq(&g[i], &o.host[i])).collect();
    if let Some(&i) = bad.first() {
        return Err(TestCaseError::fail(format!(
            "{what}: {} of {} {unit} differ; first at {} (view index {}): gpu {} cpu {}",
            bad.len(),
            g.len(),
            i,
            i as i64 - o.skew as i64,
            show(&g[i]),
            show(&o.host[i])
        )));
    }
    Ok(())
}

/// GPU == CPU under `eq`, elements shown with `{:?}`.
pub fn check<T: DeviceCopy + PartialEq + std::fmt::Debug>(
    what: &str,
    o: &Out<T>,
    eq: impl Fn(&T, &T) -> bool,
) -> Result<(), TestCaseError> {
    check_by(what, o, "elements", eq, |v| format!("{v:?}"))
}

/// FP8 codes (or E8M0 scales): GPU == CPU byte for byte.
pub fn check_u8(what: &str, o: &Out<u8>) -> Result<(), TestCaseError> {
    check_by(what, o, "bytes", |a, b| a == b, |v| format!("{v:#04x}"))
}

/// f32 scales (or amax): GPU == CPU bit for bit, NaN payloads included.
pub fn check_f32(what: &str, o: &Out<f32>) -> Result<(), TestCaseError> {
    check_by(
        what,
        o,
        "scales",
        |a, b| same_bits(*a, *b),
        |v| format!("{v:e} ({:#010x})", v.to_bits()),
    )
}

/// A runner with the case count from [`super::cases`] and no failure persistence.
pub fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: super::cases(default_cases),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Format, pow2 scales, fill and skew (skewed views one time in `1 + unskewed_weight`).
pub fn params(unskewed_weight: u32) -> impl Strategy<Value = (Fp8Format, bool, Fill, bool)> {
    (
        fmt_strategy(),
        any::<bool>(),
        fill_strategy(),
        prop_oneof![unskewed_weight => Just(false), 1 => Just(true)],
    )
}

// ------------------------------------------------------------------------------ two-phase casts

/// tensorwise of `t` (`dx` on the device, `skew` elements into its buffer, the same skew for
/// the output) on the GPU against the CPU: bytes, scale and amax. `stream`: the GPU call's
/// stream, synchronized before the comparison (None: the default stream).
#[allow(clippy::too_many_arguments)]
pub fn tensorwise_vs_cpu(
    ctx: &Context,
    p: &CastParams,
    n: usize,
    t: &Tensor,
    dx: &DevHp,
    skew: usize,
    stream: Option<&Stream>,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut o = Out::new(ctx, n, SENT_U8, skew);
    let mut sc = Out::new(ctx, 1, SENT_F32, 0);
    let mut am = Out::new(ctx, 1, SENT_F32, 0);
    Context::cpu()
        .tensorwise(
            p,
            n,
            t.hp(),
            o.cpu(),
            sc.cpu(),
            am.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
    let st = stream.map_or(StreamRef::DEFAULT, Stream::handle);
    ctx.tensorwise(p, n, dx.hp(), o.gpu(), sc.gpu(), am.gpu(), st)
        .unwrap();
    if let Some(s) = stream {
        s.synchronize().unwrap();
    }
    check_u8(what, &o)?;
    check_f32(&format!("{what} scale"), &sc)?;
    check_f32(&format!("{what} amax"), &am)
}

/// cast_transpose of `t` (m, k) on the GPU against the CPU: both layouts and both scale
/// vectors. `skew`, `stream`: as for `tensorwise_vs_cpu` (the skew applies to `out`).
#[allow(clippy::too_many_arguments)]
pub fn cast_transpose_vs_cpu(
    ctx: &Context,
    p: &CastParams,
    scaling: Scaling,
    m: usize,
    k: usize,
    t: &Tensor,
    dx: &DevHp,
    skew: usize,
    stream: Option<&Stream>,
    what: &str,
) -> Result<(), TestCaseError> {
    let (ns, nst) = match scaling {
        Scaling::Tensorwise => (1, 1),
        Scaling::Rowwise => (m, k),
    };
    let mut o = Out::new(ctx, m * k, SENT_U8, skew);
    let mut ot = Out::new(ctx, m * k, SENT_U8, 0);
    let mut sc = Out::new(ctx, ns, SENT_F32, 0);
    let mut sct = Out::new(ctx, nst, SENT_F32, 0);
    Context::cpu()
        .cast_transpose(
            p,
            scaling,
            m,
            k,
            t.hp(),
            o.cpu(),
            ot.cpu(),
            sc.cpu(),
            sct.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
    let st = stream.map_or(StreamRef::DEFAULT, Stream::handle);
    ctx.cast_transpose(
        p,
        scaling,
        m,
        k,
        dx.hp(),
        o.gpu(),
        ot.gpu(),
        sc.gpu(),
        sct.gpu(),
        st,
    )
    .unwrap();
    if let Some(s) = stream {
        s.synchronize().unwrap();
    }
    check_u8(&format!("{what} out"), &o)?;
    check_u8(&format!("{what} out_t"), &ot)?;
    check_f32(&format!("{what} scales"), &sc)?;
    check_f32(&format!("{what} scales_t"), &sct)
}

/// A hardware-vs-rule self-test launcher run on zeroed buffers of the layout the launchers
/// document (`mismatches` = 2 u64: count, recorded; `first_bad` = 24 u32: (input bits,
/// hardware, rule) x 8; `has_hw` = 1 i32), its result printed under `what`; returns the count.
pub fn selftest(
    ctx: &Context,
    what: &str,
    launch: impl FnOnce(*mut u64, *mut u32, *mut i32) -> std::os::raw::c_int,
) -> u64 {
    let mut mism = DeviceBuffer::<u64>::zeroed(ctx, 2).unwrap();
    let mut first = DeviceBuffer::<u32>::zeroed(ctx, 24).unwrap();
    let mut hw = DeviceBuffer::<i32>::zeroed(ctx, 1).unwrap();
    let st = launch(mism.as_mut_ptr(), first.as_mut_ptr(), hw.as_mut_ptr());
    hipfp8::device::check_status(what, st).unwrap();
    let (m, f) = (mism.to_vec().unwrap(), first.to_vec().unwrap());
    println!(
        "{what}: hardware path = {}, mismatches: {}",
        hw.to_vec().unwrap()[0] == 1,
        m[0]
    );
    for i in 0..(m[1].min(8) as usize) {
        println!(
            "  x = {:#010x}: hw {:#010x} rule {:#010x}",
            f[3 * i],
            f[3 * i + 1],
            f[3 * i + 2]
        );
    }
    m[0]
}
