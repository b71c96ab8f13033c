//! The C ABI on a GPU context: creation and queries, and ops on device pointers with a
//! caller's stream, bit-identical to the same C calls on the CPU backend.
//!
//! Each test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP <test>: why` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a
//! GPU every check must hold.

use std::ffi::CStr;
use std::mem::size_of;
use std::ptr::null_mut;

use hipfp8::bf16;
use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, has_launcher};
use hipfp8::ffi::*;

use hipfp8_status::*;

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
            let gs_bits: Vec<u32> = gs.iter().map(|s| s.to_bits()).collect();
            let cs_bits: Vec<u32> = scales.iter().map(|s| s.to_bits()).collect();
            assert_eq!(
                gs_bits, cs_bits,
                "format {format} flags {flags}: scales differ"
            );
        }
    }
    println!(
        "rowwise_2d through the C ABI on {}: 12 variants bit-identical to the CPU",
        rust.device_name()
    );
}

/// f64 reference and tolerance of one output element (bf16 rounding of an f32 sum).
fn gemm_check(
    got: f32,
    terms: impl Iterator<Item = f64>,
    scale: f64,
    k: usize,
) -> Result<(), String> {
    let (mut r, mut abs) = (0f64, 0f64);
    for t in terms {
        r += t;
        abs += t.abs();
    }
    let (r, abs) = (r * scale, abs * scale);
    let tol = 2.0 * ((r.abs() / 512.0) + k as f64 * abs / (1u64 << 24) as f64) + 1e-30;
    if (got as f64 - r).abs() <= tol || (got.is_nan() && r.is_nan()) {
        Ok(())
    } else {
        Err(format!("got {got}, reference {r}, tolerance {tol}"))
    }
}

#[test]
fn grouped_gemm_2d3d_on_device_pointers() {
    use hipfp8::Fp8Format;
    let Some(rust) = gpu_for_tests("grouped_gemm_2d3d_on_device_pointers") else {
        return;
    };
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    // Shapes the vendor libraries take (K % 16, N % 8), an empty group and unrouted rows.
    let (m, k, n, e) = (200usize, 64usize, 32usize, 4usize);
    let offs: Vec<i32> = vec![50, 50, 120, 190];
    let fmt = Fp8Format::E4M3Fn;
    let mut s = 0x9E37_79B9u32;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
    let mut code = || loop {
        let c = (next() & 0xFF) as u8;
        if !fmt.is_nan_code(c) {
            return c;
        }
    };
    let a: Vec<u8> = (0..m * k).map(|_| code()).collect();
    let b: Vec<u8> = (0..e * k * n).map(|_| code()).collect();
    let sa: Vec<f32> = (0..m).map(|i| 1.0 / (1 << (i % 5)) as f32).collect();
    let sb: Vec<f32> = (0..e * n)
        .map(|i| 0.5f32.powi((i % 3) as i32) * 0.01)
        .collect();
    let ad = DeviceBuffer::from_host(&rust, &a).unwrap();
    let bd = DeviceBuffer::from_host(&rust, &b).unwrap();
    let od_offs = DeviceBuffer::from_host(&rust, &offs).unwrap();
    let sad = DeviceBuffer::from_host(&rust, &sa).unwrap();
    let sbd = DeviceBuffer::from_host(&rust, &sb).unwrap();
    let stream = Stream::new(&rust).unwrap();
    for backend in [
        hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO,
        hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_REFERENCE,
    ] {
        for own_workspace in [false, true] {
            let f = hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32;
            let mut ws_bytes = 0usize;
            let st =
                hipfp8_grouped_gemm_workspace_size(gpu.0, f, f, backend as u32, e, &mut ws_bytes);
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
            let mut ws = DeviceBuffer::<u8>::alloc(&rust, ws_bytes.max(1)).unwrap();
            let (wp, wl) = if own_workspace {
                (ws.as_mut_ptr().cast(), ws.len())
            } else {
                (null_mut(), 0)
            };
            let desc = hipfp8_grouped_gemm_2d3d_desc {
                size: size_of::<hipfp8_grouped_gemm_2d3d_desc>(),
                a_format: f,
                b_format: f,
                backend: backend as u32,
                m,
                k,
                n,
                e,
            };
            let poison = vec![0xA5A5u16; m * n];
            let mut out = DeviceBuffer::<u16>::from_host(&rust, &poison).unwrap();
            let st = hipfp8_grouped_gemm_2d3d(
                gpu.0,
                &desc,
                ad.as_ptr(),
                ad.len(),
                bd.as_ptr(),
                bd.len(),
                od_offs.as_ptr(),
                od_offs.len(),
                sad.as_ptr(),
                sad.len(),
                sbd.as_ptr(),
                sbd.len(),
                out.as_mut_ptr(),
                out.len(),
                wp,
                wl,
                stream.raw().cast(),
            );
            if st == HIPFP8_STATUS_BACKEND_UNAVAILABLE {
                println!(
                    "HIPFP8_SKIP grouped_gemm_2d3d_on_device_pointers: {}",
                    last_error()
                );
                return;
            }
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{backend:?}: {}", last_error());
            stream.synchronize().unwrap();
            let got = out.to_vec().unwrap();
            let mut lo = 0usize;
            for (g, &hi) in offs.iter().enumerate() {
                for i in lo..hi as usize {
                    for j in 0..n {
                        let terms = (0..k).map(|kk| {
                            fmt.decode(a[i * k + kk]) as f64
                                * fmt.decode(b[g * n * k + j * k + kk]) as f64
                        });
                        let v = bf16::from_bits(got[i * n + j]).to_f32();
                        gemm_check(v, terms, sa[i] as f64 * sb[g * n + j] as f64, k)
                            .unwrap_or_else(|e| {
                                panic!("{backend:?} ws={own_workspace} out[{i},{j}]: {e}")
                            });
                    }
                }
                lo = hi as usize;
            }
            assert!(
                got[lo * n..].iter().all(|&v| v == 0xA5A5),
                "{backend:?}: unrouted rows were written"
            );
            println!(
                "grouped GEMM 2Dx3D through the C ABI, {backend:?}, workspace {}: within tolerance",
                if own_workspace {
                    format!("caller's ({ws_bytes} B)")
                } else {
                    "cached".into()
                }
            );
        }
    }
}
