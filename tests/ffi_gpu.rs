//! The C ABI on a GPU context: creation and queries, and ops on device pointers with a
//! caller's stream, bit-identical to the same C calls on the CPU backend.
//!
//! Each test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP <test>: why` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a
//! GPU every check must hold.

use std::ffi::CStr;
use std::mem::size_of;
use std::ptr::null_mut;

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, has_launcher};
use hipfp8::ffi::*;
use hipfp8::{Fp8Format, GemmBackend, GemmParams, bf16};

use hipfp8_status::*;

mod support;
use support::ffi_ops::all_ops;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

struct CCtx(*mut hipfp8_context);

impl CCtx {
    fn create(backend: hipfp8_backend) -> CCtx {
        let mut c = null_mut();
        let st = hipfp8_context_create(backend as u32, 0, &mut c);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
        CCtx(c)
    }
}

impl Drop for CCtx {
    fn drop(&mut self) {
        hipfp8_context_destroy(self.0);
    }
}

fn query_str(
    f: extern "C" fn(
        *const hipfp8_context,
        *mut std::ffi::c_char,
        usize,
        *mut usize,
    ) -> hipfp8_status,
    c: &CCtx,
) -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    assert_eq!(
        f(c.0, buf.as_mut_ptr(), buf.len(), null_mut()),
        HIPFP8_STATUS_SUCCESS
    );
    // SAFETY: the call wrote a NUL-terminated string into buf.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn exact(f: hipfp8::Fp8Format) -> hipfp8_format {
    use hipfp8::Fp8Format as F;
    match f {
        F::E4M3Fn => hipfp8_format::HIPFP8_FORMAT_E4M3FN,
        F::E5M2 => hipfp8_format::HIPFP8_FORMAT_E5M2,
        F::E4M3FnUz => hipfp8_format::HIPFP8_FORMAT_E4M3FNUZ,
        F::E5M2FnUz => hipfp8_format::HIPFP8_FORMAT_E5M2FNUZ,
    }
}

#[test]
fn gpu_context_through_c_abi() {
    let Some(rust) = gpu_for_tests("gpu_context_through_c_abi") else {
        return;
    };
    for backend in [
        hipfp8_backend::HIPFP8_BACKEND_GPU,
        hipfp8_backend::HIPFP8_BACKEND_AUTO,
    ] {
        let c = CCtx::create(backend);
        let mut b = hipfp8_backend::HIPFP8_BACKEND_CPU;
        assert_eq!(hipfp8_context_backend(c.0, &mut b), HIPFP8_STATUS_SUCCESS);
        assert_eq!(
            b,
            hipfp8_backend::HIPFP8_BACKEND_GPU,
            "{backend:?} should pick the GPU"
        );
        let arch = query_str(hipfp8_context_arch, &c);
        let name = query_str(hipfp8_context_device_name, &c);
        assert_eq!(arch, rust.arch());
        assert_eq!(name, rust.device_name());
        let mut f = hipfp8_format::HIPFP8_FORMAT_AUTO;
        assert_eq!(
            hipfp8_context_native_format(c.0, &mut f),
            HIPFP8_STATUS_SUCCESS
        );
        assert_eq!(f, exact(rust.native_format()));
        println!("C ABI GPU context: {name} ({arch}), native format {f:?}");
    }
    // A device that does not exist is a status, not a crash.
    let mut c = null_mut();
    let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, 4096, &mut c);
    assert_ne!(st, HIPFP8_STATUS_SUCCESS);
    assert!(c.is_null());
    println!("GPU 4096: {st:?}: {}", last_error());
}

/// Deterministic bf16 test data with special values.
fn data(m: usize, k: usize) -> Vec<bf16> {
    let mut s = 0x1234_5678u32;
    let mut v: Vec<bf16> = (0..m * k)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            bf16::from_f32(((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 7.0)
        })
        .collect();
    v[..k].fill(bf16::ZERO); // an all-zero row
    v[k + 3] = bf16::MAX;
    v[2 * k + 1] = bf16::NAN;
    v[3 * k + 2] = bf16::INFINITY;
    v[4 * k..5 * k].fill(bf16::from_f32(1e-39)); // subnormal row
    v
}

#[test]
fn rowwise_2d_on_device_pointers_matches_cpu() {
    let Some(rust) = gpu_for_tests("rowwise_2d_on_device_pointers_matches_cpu") else {
        return;
    };
    if !has_launcher("hipfp8_rowwise_2d_launch") {
        println!(
            "HIPFP8_SKIP rowwise_2d_on_device_pointers_matches_cpu: the rowwise_2d kernel is not in this build"
        );
        return;
    }
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    // The CPU oracle resolves AUTO like the GPU does (FNUZ on gfx942, OCP elsewhere).
    let mut native = hipfp8_format::HIPFP8_FORMAT_AUTO;
    assert_eq!(
        hipfp8_context_native_format(gpu.0, &mut native),
        HIPFP8_STATUS_SUCCESS
    );
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create_cpu(native as u32, &mut c),
        HIPFP8_STATUS_SUCCESS
    );
    let cpu = CCtx(c);
    let stream = Stream::new(&rust).unwrap();
    let (m, k) = (37usize, 515usize);
    let x = data(m, k);
    let xd = DeviceBuffer::from_host(&rust, &x).unwrap();
    for format in 0..6u32 {
        for flags in [0, hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32] {
            let desc = hipfp8_cast_2d_desc {
                size: size_of::<hipfp8_cast_2d_desc>(),
                input_dtype: hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32,
                format,
                flags,
                m,
                k,
            };
            let (mut out, mut scales) = (vec![0u8; m * k], vec![0f32; m]);
            let st = hipfp8_rowwise_2d(
                cpu.0,
                &desc,
                x.as_ptr().cast(),
                x.len(),
                out.as_mut_ptr(),
                out.len(),
                scales.as_mut_ptr(),
                scales.len(),
                null_mut(),
            );
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());

            let mut od = DeviceBuffer::<u8>::from_host(&rust, &vec![0xA5u8; m * k]).unwrap();
            let mut sd = DeviceBuffer::<f32>::alloc(&rust, m).unwrap();
            let st = hipfp8_rowwise_2d(
                gpu.0,
                &desc,
                xd.as_ptr().cast(),
                xd.len(),
                od.as_mut_ptr(),
                od.len(),
                sd.as_mut_ptr(),
                sd.len(),
                stream.raw().cast(),
            );
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
            stream.synchronize().unwrap();
            let (go, gs) = (od.to_vec().unwrap(), sd.to_vec().unwrap());
            let bad = out.iter().zip(&go).filter(|(a, b)| a != b).count();
            assert_eq!(
                bad, 0,
                "format {format} flags {flags}: {bad} data bytes differ between GPU and CPU"
            );
            // Scales bit for bit, NaN payloads included (a NaN scale is 0x7FC00000 on every
            // backend: docs/OPS.md).
            for (i, (g, c)) in gs.iter().zip(&scales).enumerate() {
                assert!(
                    g.to_bits() == c.to_bits(),
                    "format {format} flags {flags}: scale {i}: gpu {g:e} ({:#010x}) cpu {c:e} ({:#010x})",
                    g.to_bits(),
                    c.to_bits()
                );
            }
        }
    }
    println!(
        "rowwise_2d through the C ABI on {}: 12 variants bit-identical to the CPU",
        rust.device_name()
    );
}

/// A small MoE-shaped 2D x 3D problem: shapes the vendor libraries take (K % 16, N % 8), an
/// empty group, and rows past the last offset.
struct GemmCase {
    m: usize,
    k: usize,
    n: usize,
    offs: Vec<i32>,
    a: Vec<u8>,
    b: Vec<u8>,
    sa: Vec<f32>,
    sb: Vec<f32>,
}

const POISON_BF16: u16 = 0xA5A5;

impl GemmCase {
    /// f32 accumulation (CPU, the reference kernel, CK): 2 gamma, gamma = (K + 2) 2^-24.
    fn acc_f32(&self) -> f64 {
        2.0 * (self.k as f64 + 2.0) * 2f64.powi(-24)
    }

    /// Any implementation AUTO may pick, CUTLASS's fast FP8 accumulation on Hopper included:
    /// max(2 gamma, ceil(K/32) 2^-12) (measured 2^-13.3 S per k = 32 step on the H200).
    fn acc_fast(&self) -> f64 {
        self.acc_f32()
            .max((self.k as f64 / 32.0).ceil() * 2f64.powi(-12))
    }

    fn new() -> GemmCase {
        let fmt = hipfp8::Fp8Format::E4M3Fn;
        let (m, k, n) = (200usize, 64usize, 32usize);
        let offs = vec![50, 50, 120, 190];
        let e = offs.len();
        let mut s = 0x9E37_79B9u32;
        let mut code = || loop {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let c = (s & 0xFF) as u8;
            if !fmt.is_nan_code(c) {
                return c;
            }
        };
        let a = (0..m * k).map(|_| code()).collect();
        let b = (0..e * k * n).map(|_| code()).collect();
        let sa = (0..m).map(|i| 1.0 / (1 << (i % 5)) as f32).collect();
        let sb = (0..e * n)
            .map(|i| 0.5f32.powi((i % 3) as i32) * 0.01)
            .collect();
        GemmCase {
            m,
            k,
            n,
            offs,
            a,
            b,
            sa,
            sb,
        }
    }

    fn desc(&self, backend: hipfp8_gemm_backend) -> hipfp8_grouped_gemm_2d3d_desc {
        let f = hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32;
        hipfp8_grouped_gemm_2d3d_desc {
            size: size_of::<hipfp8_grouped_gemm_2d3d_desc>(),
            a_format: f,
            b_format: f,
            backend: backend as u32,
            m: self.m,
            k: self.k,
            n: self.n,
            e: self.offs.len(),
        }
    }

    /// The largest error beyond the bf16 rounding, relative to S (the sum of |terms|).
    fn worst(&self, got: &[u16]) -> String {
        let fmt = hipfp8::Fp8Format::E4M3Fn;
        let (k, n) = (self.k, self.n);
        let (mut worst, mut at) = (0f64, (0, 0));
        let mut lo = 0usize;
        for (g, &hi) in self.offs.iter().enumerate() {
            for i in lo..hi as usize {
                for j in 0..n {
                    let (mut r, mut abs) = (0f64, 0f64);
                    for kk in 0..k {
                        let t = fmt.decode(self.a[i * k + kk]) as f64
                            * fmt.decode(self.b[g * n * k + j * k + kk]) as f64;
                        r += t;
                        abs += t.abs();
                    }
                    let sc = self.sa[i] as f64 * self.sb[g * n + j] as f64;
                    let v = bf16::from_bits(got[i * n + j]).to_f32() as f64;
                    let beyond = (v - r * sc).abs() - 2f64.powi(-8) * (r * sc).abs();
                    let rel = beyond.max(0.0) / (abs * sc.abs());
                    if rel > worst {
                        (worst, at) = (rel, (i, j));
                    }
                }
            }
            lo = hi as usize;
        }
        format!(
            "vs f64: largest error beyond bf16 rounding {worst:.2e} * S (2^{:.1}) at {at:?}",
            worst.log2()
        )
    }

    /// Every routed element against the f64 reference with the tolerance written down in
    /// tests/gpu_grouped_gemm.rs: `|out - ref| <= 2^-8 |ref| + acc * S`, S = sum |terms| *
    /// |sa sb| (bf16 output rounding and the scale multiplies, then `acc` for the
    /// accumulation; see `acc_f32` / `acc_fast`); unrouted rows untouched.
    fn check(&self, what: &str, got: &[u16], acc: f64) {
        let fmt = hipfp8::Fp8Format::E4M3Fn;
        let (k, n) = (self.k, self.n);
        let mut lo = 0usize;
        for (g, &hi) in self.offs.iter().enumerate() {
            for i in lo..hi as usize {
                for j in 0..n {
                    let (mut r, mut abs) = (0f64, 0f64);
                    for kk in 0..k {
                        let t = fmt.decode(self.a[i * k + kk]) as f64
                            * fmt.decode(self.b[g * n * k + j * k + kk]) as f64;
                        r += t;
                        abs += t.abs();
                    }
                    let sc = self.sa[i] as f64 * self.sb[g * n + j] as f64;
                    let (r, abs) = (r * sc, abs * sc.abs());
                    let tol = 2f64.powi(-8) * r.abs() + acc * abs;
                    let v = bf16::from_bits(got[i * n + j]).to_f32() as f64;
                    assert!(
                        (v - r).abs() <= tol,
                        "{what}: out[{i},{j}] = {v}, f64 reference {r}, tolerance {tol}"
                    );
                }
            }
            lo = hi as usize;
        }
        assert!(
            got[lo * n..].iter().all(|&v| v == POISON_BF16),
            "{what}: unrouted rows were written"
        );
    }
}

#[test]
fn grouped_gemm_2d3d_through_c_abi() {
    let t = GemmCase::new();
    let e = t.offs.len();
    // The CPU backend through the C ABI, against the same reference: this part runs anywhere.
    let cpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_CPU);
    let mut out = vec![POISON_BF16; t.m * t.n];
    let desc = t.desc(hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO);
    let st = hipfp8_grouped_gemm_2d3d(
        cpu.0,
        &desc,
        t.a.as_ptr(),
        t.a.len(),
        t.b.as_ptr(),
        t.b.len(),
        t.offs.as_ptr(),
        e,
        t.sa.as_ptr(),
        t.sa.len(),
        t.sb.as_ptr(),
        t.sb.len(),
        out.as_mut_ptr(),
        out.len(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    t.check("CPU", &out, t.acc_f32());

    let Some(rust) = gpu_for_tests("grouped_gemm_2d3d_through_c_abi") else {
        return;
    };
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    let ad = DeviceBuffer::from_host(&rust, &t.a).unwrap();
    let bd = DeviceBuffer::from_host(&rust, &t.b).unwrap();
    let offs_d = DeviceBuffer::from_host(&rust, &t.offs).unwrap();
    let sad = DeviceBuffer::from_host(&rust, &t.sa).unwrap();
    let sbd = DeviceBuffer::from_host(&rust, &t.sb).unwrap();
    let stream = Stream::new(&rust).unwrap();
    for backend in [
        hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO,
        hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_REFERENCE,
    ] {
        for own_workspace in [false, true] {
            let d = t.desc(backend);
            let mut ws_bytes = 0usize;
            let st = hipfp8_grouped_gemm_workspace_size(
                gpu.0,
                d.a_format,
                d.b_format,
                d.backend,
                e,
                &mut ws_bytes,
            );
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
            let mut ws = DeviceBuffer::<u8>::zeroed(&rust, ws_bytes.max(1)).unwrap();
            let (wp, wl) = if own_workspace {
                (ws.as_mut_ptr().cast(), ws.len())
            } else {
                (null_mut(), 0)
            };
            let mut od =
                DeviceBuffer::<u16>::from_host(&rust, &vec![POISON_BF16; t.m * t.n]).unwrap();
            let st = hipfp8_grouped_gemm_2d3d(
                gpu.0,
                &d,
                ad.as_ptr(),
                ad.len(),
                bd.as_ptr(),
                bd.len(),
                offs_d.as_ptr(),
                offs_d.len(),
                sad.as_ptr(),
                sad.len(),
                sbd.as_ptr(),
                sbd.len(),
                od.as_mut_ptr(),
                od.len(),
                wp,
                wl,
                stream.raw().cast(),
            );
            if st == HIPFP8_STATUS_BACKEND_UNAVAILABLE {
                println!(
                    "HIPFP8_SKIP grouped_gemm_2d3d_through_c_abi: {}",
                    last_error()
                );
                return;
            }
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{backend:?}: {}", last_error());
            stream.synchronize().unwrap();
            let via_c = od.to_vec().unwrap();
            let what = format!(
                "{backend:?}, workspace {}",
                if own_workspace {
                    format!("caller's ({ws_bytes} B)")
                } else {
                    "cached".into()
                }
            );
            // The C ABI adds nothing to the numbers: the same call through the Rust API (same
            // implementation, same stream) gives the same bits.
            let gb = match backend {
                hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_REFERENCE => GemmBackend::Reference,
                _ => GemmBackend::Auto,
            };
            let p = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn).with_backend(gb);
            let poison = vec![bf16::from_bits(POISON_BF16); t.m * t.n];
            let mut or = DeviceBuffer::<bf16>::from_host(&rust, &poison).unwrap();
            rust.grouped_gemm_2d3d(
                &p,
                t.m,
                t.k,
                t.n,
                e,
                ad.src(),
                bd.src(),
                offs_d.src(),
                sad.src(),
                sbd.src(),
                or.dst(),
                stream.handle(),
            )
            .unwrap();
            stream.synchronize().unwrap();
            let via_rust: Vec<u16> = or.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
            assert!(
                via_c == via_rust,
                "{what}: C ABI and Rust API outputs differ"
            );
            // The reference kernel accumulates in f32; AUTO may run CUTLASS's fast accumulation.
            if backend == hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_REFERENCE {
                t.check(&what, &via_c, t.acc_f32());
                println!(
                    "grouped GEMM 2Dx3D, C ABI on the GPU, {what}: == Rust API, within tolerance"
                );
            } else {
                t.check(&what, &via_c, t.acc_fast());
                println!(
                    "grouped GEMM 2Dx3D, C ABI on the GPU, {what}: == Rust API, within tolerance; {}",
                    t.worst(&via_c)
                );
            }
        }
    }
}

/// Every scale-and-cast export (the ops of the bad-input matrix, GEMMs apart) on device copies
/// of the same buffers as a CPU call: every output buffer byte for byte equal, including the
/// poison where nothing may be written; f32 outputs may differ only in a NaN's payload. An op
/// whose GPU arm is not in the build is a printed skip, never a pass.
#[test]
fn every_cast_op_on_device_pointers_matches_cpu() {
    let Some(rust) = gpu_for_tests("every_cast_op_on_device_pointers_matches_cpu") else {
        return;
    };
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    let mut native = hipfp8_format::HIPFP8_FORMAT_AUTO;
    assert_eq!(
        hipfp8_context_native_format(gpu.0, &mut native),
        HIPFP8_STATUS_SUCCESS
    );
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create_cpu(native as u32, &mut c),
        HIPFP8_STATUS_SUCCESS
    );
    let cpu = CCtx(c);
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    for (idx, mut op) in all_ops().into_iter().enumerate() {
        if op.name.contains("grouped_gemm") {
            continue; // accumulation order differs: grouped_gemm_2d3d_through_c_abi
        }
        for (i, b) in op.bufs.iter_mut().enumerate() {
            b.fill_random((idx * 31 + i) as u32);
        }
        let mut on_cpu = op.clone();
        let st = on_cpu.invoke(cpu.0);
        assert_eq!(
            st,
            HIPFP8_STATUS_SUCCESS,
            "{} on the CPU: {}",
            op.name,
            last_error()
        );

        let mut dev: Vec<DeviceBuffer<u8>> = op
            .bufs
            .iter()
            .map(|b| DeviceBuffer::from_host(&rust, b.bytes()).unwrap())
            .collect();
        let ptrs: Vec<*mut u8> = dev.iter_mut().map(|d| d.as_mut_ptr()).collect();
        let st = op.invoke_ptrs(gpu.0, &ptrs);
        if st == HIPFP8_STATUS_BACKEND_UNAVAILABLE || st == HIPFP8_STATUS_NOT_SUPPORTED {
            println!("HIPFP8_SKIP {} on the GPU: {}", op.name, last_error());
            skipped.push(op.name);
            continue;
        }
        assert_eq!(
            st,
            HIPFP8_STATUS_SUCCESS,
            "{} on the GPU: {}",
            op.name,
            last_error()
        );
        for (b, d) in on_cpu.bufs.iter().zip(&dev).filter(|(b, _)| b.output) {
            let (want, got) = (b.bytes(), d.to_vec().unwrap());
            if want == got.as_slice() {
                continue;
            }
            // Every output is bit for bit, NaN payloads included; report the first f32 that
            // differs in a readable form.
            assert_eq!(b.elem, 4, "{}: `{}` differs from the CPU", op.name, b.name);
            for (i, (w, g)) in want.chunks(4).zip(got.chunks(4)).enumerate() {
                let w = f32::from_ne_bytes(w.try_into().unwrap());
                let g = f32::from_ne_bytes(g.try_into().unwrap());
                assert!(
                    w.to_bits() == g.to_bits(),
                    "{}: `{}`[{i}]: gpu {g:e} ({:#010x}) cpu {w:e} ({:#010x})",
                    op.name,
                    b.name,
                    g.to_bits(),
                    w.to_bits()
                );
            }
        }
        ran.push(op.name);
    }
    println!(
        "C ABI on {}: GPU == CPU for {} calls {ran:?}; skipped {skipped:?}",
        rust.device_name(),
        ran.len()
    );
    assert!(!ran.is_empty(), "no op ran on the GPU");
}

/// `hipfp8_grouped_gemm_2d2d_workspace_size` (the shape-aware query: with the 2D x 2D staging
/// area) on a GPU context, on offsets with an empty group, starts off a 16-token boundary and
/// tokens past the last group: it equals the Rust `grouped_gemm_op_workspace_size`; a caller
/// workspace of that size gives the bits of a NULL (cached) one for AUTO and REFERENCE; one
/// byte less is OUTPUT_TOO_SMALL with the output untouched (the implementation never depends
/// on the workspace).
#[test]
fn grouped_gemm_2d2d_workspace_through_c_abi() {
    let name = "grouped_gemm_2d2d_workspace_through_c_abi";
    let Some(rust) = gpu_for_tests(name) else {
        return;
    };
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    let (n, mt, k) = (136usize, 512usize, 264usize);
    let offs = [100i32, 100, 333, 497];
    let g = offs.len();
    // Finite codes of every FP8 flavour (no 0x7F/0xFF, no 0x80), scales near 1.
    let code = |i: usize| ((i.wrapping_mul(2654435761) >> 7) % 0x70) as u8 | ((i & 1) << 7) as u8;
    let a: Vec<u8> = (0..n * mt).map(code).collect();
    let b: Vec<u8> = (0..k * mt).map(|i| code(i + 7)).collect();
    let sa: Vec<f32> = (0..g * n).map(|i| 1.0 + (i % 5) as f32 / 8.0).collect();
    let sb: Vec<f32> = (0..g * k).map(|i| 0.5 + (i % 3) as f32 / 4.0).collect();
    let (ad, bd) = (
        DeviceBuffer::from_host(&rust, &a).unwrap(),
        DeviceBuffer::from_host(&rust, &b).unwrap(),
    );
    let offs_d = DeviceBuffer::from_host(&rust, &offs).unwrap();
    let (sad, sbd) = (
        DeviceBuffer::from_host(&rust, &sa).unwrap(),
        DeviceBuffer::from_host(&rust, &sb).unwrap(),
    );
    let stream = Stream::new(&rust).unwrap();
    for (backend, gb) in [
        (
            hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO,
            GemmBackend::Auto,
        ),
        (
            hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_REFERENCE,
            GemmBackend::Reference,
        ),
    ] {
        let d = hipfp8_grouped_gemm_2d2d_desc {
            size: size_of::<hipfp8_grouped_gemm_2d2d_desc>(),
            a_format: hipfp8_format::HIPFP8_FORMAT_AUTO as u32,
            b_format: hipfp8_format::HIPFP8_FORMAT_AUTO as u32,
            backend: backend as u32,
            n,
            mt,
            k,
        };
        let mut bytes = 0usize;
        let st = hipfp8_grouped_gemm_2d2d_workspace_size(gpu.0, &d, g, &mut bytes);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
        let fmt = rust.native_format();
        let p = GemmParams::new(fmt, fmt).with_backend(gb);
        let op = hipfp8::GroupedOp::TwoD2D { n, mt, k };
        assert_eq!(
            bytes,
            rust.grouped_gemm_op_workspace_size(&p, op, g).unwrap(),
            "{backend:?}: the C and Rust size queries"
        );
        let mut ws = DeviceBuffer::<u8>::zeroed(&rust, bytes.max(1)).unwrap();
        let call = |wp: *mut std::ffi::c_void, wl: usize| {
            let mut od =
                DeviceBuffer::<u16>::from_host(&rust, &vec![POISON_BF16; g * n * k]).unwrap();
            let st = hipfp8_grouped_gemm_2d2d(
                gpu.0,
                &d,
                ad.as_ptr(),
                ad.len(),
                bd.as_ptr(),
                bd.len(),
                offs_d.as_ptr(),
                offs_d.len(),
                sad.as_ptr(),
                sad.len(),
                sbd.as_ptr(),
                sbd.len(),
                od.as_mut_ptr(),
                od.len(),
                wp,
                wl,
                stream.raw().cast(),
            );
            stream.synchronize().unwrap();
            (st, od.to_vec().unwrap())
        };
        let (st, cached) = call(null_mut(), 0);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{backend:?}: {}", last_error());
        let wp = ws.as_mut_ptr().cast();
        let (st, own) = call(wp, bytes);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{backend:?}: {}", last_error());
        assert!(
            cached == own,
            "{backend:?}: the cached and the caller's ({bytes} B) workspace give different bits"
        );
        if bytes > 0 {
            let (st, out) = call(wp, bytes - 1);
            assert_eq!(st, HIPFP8_STATUS_OUTPUT_TOO_SMALL, "{backend:?}");
            assert!(last_error().contains("workspace"), "{}", last_error());
            assert!(
                out.iter().all(|&v| v == POISON_BF16),
                "{backend:?}: a refused call wrote its output"
            );
        }
        println!("{name}: {backend:?}: {bytes} B, cached == caller's bit for bit");
    }
}
