//! Reliability of the C ABI on the CPU backend (issue 17): overlapping buffers are refused,
//! empty problems with huge dimensions do not overflow, and a failed scratch allocation is a
//! status (OUT_OF_MEMORY) instead of an abort, with the context still usable afterwards. On a
//! GPU (`gpu_ordering`): synchronous copies and fills have landed for work on any stream.

use std::mem::size_of;
use std::ptr::{null, null_mut};

use hipfp8::ffi::*;

use hipfp8_status::*;

mod support;
use support::ffi_ops::*;

const NS: hipStream_t = null_mut();

/// An arena of `bytes` bytes (8-aligned) filled with a pattern.
fn arena(bytes: usize, fill: u8) -> Vec<u64> {
    vec![u64::from_ne_bytes([fill; 8]); bytes.div_ceil(8) + 1]
}

/// Every output of every op, placed over every other buffer of the call (same start, and
/// shifted by 8 bytes into it), is OVERLAPPING_BUFFERS with nothing written.
#[test]
fn overlapping_buffers_are_refused() {
    let ctx = Ctx::cpu();
    let mut cases = 0;
    for mut op in all_ops() {
        // the valid pointers of the op's own buffers
        let base: Vec<*mut u8> = op.bufs.iter_mut().map(|b| b.ptr()).collect();
        let n = op.bufs.len();
        for o in 0..n {
            if !op.bufs[o].output || op.bufs[o].len == 0 {
                continue;
            }
            for other in (0..n).filter(|&j| j != o && op.bufs[j].len > 0) {
                let (ob, bb) = (&op.bufs[o], &op.bufs[other]);
                let (obytes, bbytes) = (ob.len * ob.elem, bb.len * bb.elem);
                for shift in [0usize, 8] {
                    if shift >= bbytes {
                        continue;
                    }
                    // Both buffers live in one arena big enough for either placement, so a
                    // library that missed the overlap could not write out of bounds.
                    let mut mem = arena(shift + obytes + bbytes, 0xA5);
                    let snapshot = mem.clone();
                    let start = mem.as_mut_ptr().cast::<u8>();
                    let mut ptrs = base.clone();
                    ptrs[other] = start;
                    // SAFETY: shift < bbytes <= the arena's size.
                    ptrs[o] = unsafe { start.add(shift) };
                    let st = op.invoke_ptrs(ctx.0, &ptrs);
                    let msg = last_error();
                    assert_eq!(
                        st, HIPFP8_STATUS_OVERLAPPING_BUFFERS,
                        "{}: `{}` over `{}` (+{shift}): {msg}",
                        op.name, ob.name, bb.name
                    );
                    assert!(
                        msg.starts_with(op.name) && msg.contains("overlap"),
                        "{}: {msg}",
                        op.name
                    );
                    assert!(
                        msg.contains(&format!("`{}`", ob.name))
                            && msg.contains(&format!("`{}`", bb.name)),
                        "{msg}"
                    );
                    assert!(mem == snapshot, "{}: arena written", op.name);
                    cases += 1;
                }
            }
        }
        // The unshifted call is still valid.
        assert_eq!(op.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}", op.name);
    }
    assert!(cases > 100, "only {cases} overlap cases");
    println!(
        "overlapping buffers: {cases} (op, output, other buffer, shift) cases refused, nothing written"
    );
}

/// Two inputs may share memory (they are only read); adjacent, non-overlapping buffers are
/// fine too.
#[test]
fn shared_inputs_and_adjacent_buffers_are_accepted() {
    let ctx = Ctx::cpu();
    // grouped_gemm_2d2d with a and b the same bytes (n == k), scale_a and scale_b the same.
    let (n, mt, k) = (4usize, 8usize, 4usize);
    let d = hipfp8_grouped_gemm_2d2d_desc {
        size: size_of::<hipfp8_grouped_gemm_2d2d_desc>(),
        a_format: 0,
        b_format: 0,
        backend: 0,
        n,
        mt,
        k,
    };
    let ab = vec![0x38u8; n * mt];
    let offs = [3i32, 8];
    let sc = vec![1.0f32; 2 * n];
    // out directly after the scales in one arena: adjacent, not overlapping
    let mut mem = arena(2 * n * 4 + 2 * n * k * 2, 0);
    let base = mem.as_mut_ptr().cast::<u8>();
    let scp = base.cast::<f32>();
    // SAFETY: 2n floats fit before the output in the arena.
    let out = unsafe { base.add(2 * n * 4) }.cast::<u16>();
    // SAFETY: the arena holds 2n floats at its start.
    unsafe { std::ptr::copy_nonoverlapping(sc.as_ptr(), scp, 2 * n) };
    let st = hipfp8_grouped_gemm_2d2d(
        ctx.0,
        &d,
        ab.as_ptr(),
        ab.len(),
        ab.as_ptr(),
        ab.len(),
        offs.as_ptr(),
        2,
        scp,
        2 * n,
        scp,
        2 * k,
        out,
        2 * n * k,
        null_mut(),
        0,
        NS,
    );
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    // 1.0 * 1.0 summed over 3 (group 0) and 5 (group 1) rows
    // SAFETY: the output lies in the arena.
    let o = unsafe { std::slice::from_raw_parts(out, 2 * n * k) };
    assert_eq!(half::bf16::from_bits(o[0]).to_f32(), 3.0);
    assert_eq!(half::bf16::from_bits(o[n * k]).to_f32(), 5.0);
}

/// Empty problems whose other dimensions multiply past usize: success, nothing written, no
/// panic (issue 17: `n*k` in rowwise_3d_transpose_rhs with e = 0 and grouped_gemm_2d2d
/// with G = 0).
#[test]
fn empty_problems_with_huge_dimensions() {
    let ctx = Ctx::cpu();
    let huge = 1usize << 40;
    let d = hipfp8_cast_3d_desc {
        size: size_of::<hipfp8_cast_3d_desc>(),
        input_dtype: 1,
        format: 0,
        flags: 0,
        e: 0,
        k: huge,
        n: huge,
    };
    let mut out = [0xA5u8; 4];
    let mut sc = [7.0f32; 2];
    for f in [hipfp8_rowwise_3d_transpose_rhs, hipfp8_colwise_3d] {
        let st = f(
            ctx.0,
            &d,
            [0f32; 1].as_ptr().cast(),
            0,
            out.as_mut_ptr(),
            0,
            sc.as_mut_ptr(),
            0,
            NS,
        );
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
        assert_eq!((out, sc), ([0xA5; 4], [7.0; 2]));
    }
    let g = hipfp8_grouped_gemm_2d2d_desc {
        size: size_of::<hipfp8_grouped_gemm_2d2d_desc>(),
        a_format: 0,
        b_format: 0,
        backend: 0,
        n: huge,
        mt: 0,
        k: huge,
    };
    let mut o = [0x1234u16; 2];
    let st = hipfp8_grouped_gemm_2d2d(
        ctx.0,
        &g,
        null(),
        0,
        null(),
        0,
        null(),
        0,
        null(),
        0,
        null(),
        0,
        o.as_mut_ptr(),
        0,
        null_mut(),
        0,
        NS,
    );
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    assert_eq!(o, [0x1234; 2]);
    // With one group the product is checked and reported.
    let st = hipfp8_grouped_gemm_2d2d(
        ctx.0,
        &g,
        null(),
        0,
        null(),
        0,
        [0i32].as_ptr(),
        1,
        null(),
        0,
        null(),
        0,
        o.as_mut_ptr(),
        0,
        null_mut(),
        0,
        NS,
    );
    assert_eq!(st, HIPFP8_STATUS_SIZE_OVERFLOW, "{}", last_error());
}

// ---- allocation failure, in a child process under RLIMIT_AS ---------------------------------

#[cfg(target_os = "linux")]
mod oom {
    use super::*;

    #[repr(C)]
    struct Rlimit {
        cur: u64,
        max: u64,
    }
    unsafe extern "C" {
        fn setrlimit(resource: i32, rlim: *const Rlimit) -> i32;
    }
    const RLIMIT_AS: i32 = 9;

    /// Virtual size of this process in bytes (/proc/self/statm, pages).
    fn vm_bytes() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().next().unwrap().parse().unwrap();
        pages * 4096
    }

    /// Cap the address space at the current size plus `headroom` bytes.
    fn limit_address_space(headroom: u64) {
        let lim = Rlimit {
            cur: vm_bytes() + headroom,
            max: u64::MAX,
        };
        // SAFETY: a valid rlimit struct; lowering the soft limit is always allowed.
        assert_eq!(unsafe { setrlimit(RLIMIT_AS, &lim) }, 0);
    }

    /// Run test `name` of this binary again in a child with CHILD set; it must exit 0 (an
    /// abort on allocation failure would be SIGABRT).
    fn in_child(name: &str) {
        if std::env::var_os("HIPFP8_RELIABILITY_CHILD").is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env("HIPFP8_RELIABILITY_CHILD", "1")
            .env("RAYON_NUM_THREADS", "2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "child {name}: {:?}\n{text}",
            out.status
        );
        assert!(text.contains("1 passed"), "child ran no test: {text}");
    }

    fn is_child() -> bool {
        std::env::var_os("HIPFP8_RELIABILITY_CHILD").is_some()
    }

    /// A small call that must succeed (the context keeps working after a failure).
    fn small_call_works(ctx: &Ctx) {
        let mut ops = all_ops();
        let op = &mut ops[0];
        assert_eq!(op.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}", last_error());
    }

    /// grouped_gemm_2d3d with m=1, k=n=16384, e=1 (the example): the CPU scratch of
    /// the decoded B is 1 GiB; under a limit of 512 MiB above the inputs it fails.
    #[test]
    fn grouped_gemm_scratch_failure_is_a_status() {
        in_child("oom::grouped_gemm_scratch_failure_is_a_status");
        if !is_child() {
            return;
        }
        let ctx = Ctx::cpu();
        small_call_works(&ctx); // starts rayon's threads before the limit
        let (m, k, n) = (1usize, 16384usize, 16384usize);
        let d = hipfp8_grouped_gemm_2d3d_desc {
            size: size_of::<hipfp8_grouped_gemm_2d3d_desc>(),
            a_format: 0,
            b_format: 0,
            backend: 0,
            m,
            k,
            n,
            e: 1,
        };
        let a = vec![0x38u8; m * k];
        let b = vec![0x38u8; k * n];
        let offs = [1i32];
        let (sa, sb) = (vec![1.0f32; m], vec![1.0f32; n]);
        let mut out = vec![0x5555u16; m * n];
        limit_address_space(512 << 20);
        let st = hipfp8_grouped_gemm_2d3d(
            ctx.0,
            &d,
            a.as_ptr(),
            a.len(),
            b.as_ptr(),
            b.len(),
            offs.as_ptr(),
            1,
            sa.as_ptr(),
            m,
            sb.as_ptr(),
            n,
            out.as_mut_ptr(),
            out.len(),
            null_mut(),
            0,
            NS,
        );
        let msg = last_error();
        assert_eq!(st, HIPFP8_STATUS_OUT_OF_MEMORY, "{msg}");
        assert!(
            msg.starts_with("hipfp8_grouped_gemm_2d3d") && msg.contains("scratch"),
            "{msg}"
        );
        assert!(out.iter().all(|&v| v == 0x5555), "output written");
        small_call_works(&ctx);
        // A smaller problem on the same context succeeds under the same limit.
        let d2 = hipfp8_grouped_gemm_2d3d_desc { k: 1024, ..d };
        let st = hipfp8_grouped_gemm_2d3d(
            ctx.0,
            &d2,
            a.as_ptr(),
            1024,
            b.as_ptr(),
            1024 * n,
            offs.as_ptr(),
            1,
            sa.as_ptr(),
            m,
            sb.as_ptr(),
            n,
            out.as_mut_ptr(),
            out.len(),
            null_mut(),
            0,
            NS,
        );
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
        assert!(
            out.iter()
                .all(|&v| half::bf16::from_bits(v).to_f32() == 1024.0)
        );
    }

    /// per_group_rowwise / per_group_colwise_dual scratch (G x M / G x K scales) under a
    /// limit below their size: OUT_OF_MEMORY, outputs untouched.
    #[test]
    fn cast_scratch_failure_is_a_status() {
        in_child("oom::cast_scratch_failure_is_a_status");
        if !is_child() {
            return;
        }
        let ctx = Ctx::cpu();
        small_call_works(&ctx);
        // Everything the test needs is allocated before the limit.
        // per_group_rowwise: m rows, k = g columns of one each; scratch m*g floats = 64 MiB
        let (m, g) = (4096usize, 4096usize);
        let k = g;
        let x = vec![0.0f32; m * k];
        let offs: Vec<i32> = (1..=g as i32).collect();
        let mut out = vec![0xA5u8; m * k];
        let mut sc = vec![7.0f32; g * m];
        let d = hipfp8_cast_2d_desc {
            size: size_of::<hipfp8_cast_2d_desc>(),
            input_dtype: 1,
            format: 0,
            flags: 0,
            m,
            k,
        };
        limit_address_space(16 << 20);
        let st = hipfp8_per_group_rowwise(
            ctx.0,
            &d,
            x.as_ptr().cast(),
            x.len(),
            offs.as_ptr(),
            g,
            out.as_mut_ptr(),
            out.len(),
            sc.as_mut_ptr(),
            sc.len(),
            NS,
        );
        let msg = last_error();
        assert_eq!(st, HIPFP8_STATUS_OUT_OF_MEMORY, "{msg}");
        assert!(msg.starts_with("hipfp8_per_group_rowwise"), "{msg}");
        assert!(out.iter().all(|&v| v == 0xA5) && sc.iter().all(|&v| v == 7.0));
        small_call_works(&ctx);
        // per_group_colwise_dual over the two halves of x (m rows of k/2 columns each, as
        // row-major matrices): two G x k/2 scratches of 32 MiB, refused before either
        // tensor is written.
        let h = k / 2;
        let (x1, x2) = x.split_at(m * h);
        let (o1, o2) = out.split_at_mut(m * h);
        let (s1, s2) = sc.split_at_mut(g * h);
        let dd = hipfp8_cast_dual_desc {
            size: size_of::<hipfp8_cast_dual_desc>(),
            input_dtype: 1,
            format: 0,
            flags: 0,
            input_dtype2: 1,
            m,
            k1: h,
            k2: h,
        };
        let st = hipfp8_per_group_colwise_dual(
            ctx.0,
            &dd,
            x1.as_ptr().cast(),
            x1.len(),
            x2.as_ptr().cast(),
            x2.len(),
            offs.as_ptr(),
            g,
            o1.as_mut_ptr(),
            o1.len(),
            s1.as_mut_ptr(),
            g * h,
            o2.as_mut_ptr(),
            o2.len(),
            s2.as_mut_ptr(),
            g * h,
            NS,
        );
        let msg = last_error();
        assert_eq!(st, HIPFP8_STATUS_OUT_OF_MEMORY, "{msg}");
        assert!(out.iter().all(|&v| v == 0xA5) && sc.iter().all(|&v| v == 7.0));
        small_call_works(&ctx);
    }
}

/// On the GPU (skips with a printed reason without one): the synchronous copies and fills of
/// `DeviceBuffer` (`copy_from_host`, `copy_from`, `fill_bytes`) have landed when they return,
/// for work queued next on any stream, non-blocking ones included. They run on the legacy
/// default stream, which non-blocking streams do not wait for, and the runtime returns from a
/// pageable host-to-device copy (and a device memset) before the bytes are in place. The
/// soak test (tests/gpu_soak.rs) met this as a wrong `amax` of the scaled casts under
/// compute-sanitizer: the poison upload of `amax` landed after the op's own zeroing of it.
mod gpu_ordering {
    use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
    use hipfp8::{CastParams, Context, Fp8Format, HpSrc, bf16};

    /// A 32 MiB buffer and its host contents: uploaded ahead of a checked small copy.
    fn ballast(ctx: &Context) -> (DeviceBuffer<u8>, Vec<u8>) {
        let n = 32 << 20;
        (DeviceBuffer::<u8>::alloc(ctx, n).unwrap(), vec![0x3C; n])
    }

    /// The two tests never overlap: the first asks whether the legacy stream is idle.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// "Returns when done": nothing of the copy is left on the legacy default stream (nothing
    /// else in this process queues work there while the test runs). Without the wait, a 32 MiB
    /// D2D copy or memset is still running here, and a pageable upload's last DMA may be.
    fn landed(what: &str) {
        assert!(
            Stream::default_stream().is_idle().unwrap(),
            "{what} returned with its work still queued on the legacy stream"
        );
    }

    fn read_on(b: &DeviceBuffer<u8>, s: &Stream) -> Vec<u8> {
        let mut v = vec![0u8; b.len()];
        // SAFETY: `v` is neither read nor dropped before the stream is synchronised.
        unsafe { b.copy_to_host_async(&mut v, s.handle()).unwrap() };
        s.synchronize().unwrap();
        v
    }

    #[test]
    fn synchronous_copies_land_before_non_blocking_stream_work() {
        let Some(ctx) = gpu_for_tests("synchronous_copies_land_before_non_blocking_stream_work")
        else {
            return;
        };
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let s = Stream::new_non_blocking(&ctx).unwrap();
        let (mut big, fill) = ballast(&ctx);
        let mut big2 = DeviceBuffer::<u8>::alloc(&ctx, big.len()).unwrap();
        let mut small = DeviceBuffer::<u8>::zeroed(&ctx, 4096).unwrap();
        let mut other = DeviceBuffer::<u8>::zeroed(&ctx, 4096).unwrap();
        for round in 1..=24u8 {
            big.copy_from_host(&fill).unwrap();
            landed("copy_from_host (32 MiB)");
            big.fill_bytes(round).unwrap();
            landed("fill_bytes (32 MiB)");
            big2.copy_from(&big).unwrap();
            landed("copy_from (32 MiB)");
            big.copy_from_host(&fill).unwrap();
            let want = vec![round; 4096];
            small.copy_from_host(&want).unwrap();
            assert_eq!(read_on(&small, &s), want, "round {round}: copy_from_host");
            big.copy_from_host(&fill).unwrap();
            small.fill_bytes(round ^ 0xFF).unwrap();
            assert!(
                read_on(&small, &s).iter().all(|&v| v == round ^ 0xFF),
                "round {round}: fill_bytes"
            );
            big.copy_from_host(&fill).unwrap();
            other.copy_from(&small).unwrap();
            assert!(
                read_on(&other, &s).iter().all(|&v| v == round ^ 0xFF),
                "round {round}: copy_from"
            );
        }
    }

    /// The soak's failing calls: poison uploaded synchronously into the outputs of the
    /// given-scale casts, then the op on a non-blocking stream, from two threads on two
    /// contexts at once, each result equal to the CPU backend's bit for bit.
    #[test]
    fn scaled_casts_after_synchronous_uploads_on_non_blocking_streams() {
        let Some(ctx) =
            gpu_for_tests("scaled_casts_after_synchronous_uploads_on_non_blocking_streams")
        else {
            return;
        };
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let ctx2 = Context::gpu(0).unwrap();
        let cpu = Context::cpu();
        let (m, k) = (256usize, 1024usize);
        let n = m * k;
        std::thread::scope(|sc| {
            for (t, g) in [&ctx, &ctx2].into_iter().enumerate() {
                let cpu = &cpu;
                sc.spawn(move || {
                    let s = Stream::new_non_blocking(g).unwrap();
                    let (mut big, fill) = ballast(g);
                    let p = CastParams::new(Fp8Format::E4M3Fn, false);
                    let mut dx = DeviceBuffer::<bf16>::alloc(g, n).unwrap();
                    let mut dscale = DeviceBuffer::<f32>::alloc(g, 1).unwrap();
                    let mut dout = DeviceBuffer::<u8>::alloc(g, n).unwrap();
                    let mut dout_t = DeviceBuffer::<u8>::alloc(g, n).unwrap();
                    let mut damax = DeviceBuffer::<f32>::alloc(g, 1).unwrap();
                    for round in 0..12usize {
                        let seed = (t * 100 + round) as u32;
                        let x: Vec<bf16> = (0..n)
                            .map(|i| {
                                let h = (i as u32 ^ seed.wrapping_mul(0x9E37_79B9))
                                    .wrapping_mul(0x85EB_CA6B);
                                bf16::from_f32(((h >> 8) as f32 / (1 << 24) as f32 - 0.5) * 3.0)
                            })
                            .collect();
                        let scale = [64.0f32 + round as f32];
                        let (mut out, mut out_t, mut amax) = (vec![0u8; n], vec![0u8; n], [0f32]);
                        let ct = round % 2 == 1;
                        if ct {
                            cpu.cast_transpose_scaled(
                                &p,
                                m,
                                k,
                                (&x).into(),
                                (&scale[..]).into(),
                                (&mut out).into(),
                                (&mut out_t).into(),
                                (&mut amax[..]).into(),
                                Default::default(),
                            )
                            .unwrap();
                        } else {
                            cpu.tensorwise_scaled(
                                &p,
                                n,
                                (&x).into(),
                                (&scale[..]).into(),
                                (&mut out).into(),
                                (&mut amax[..]).into(),
                                Default::default(),
                            )
                            .unwrap();
                        }
                        // the soak's order: inputs, then every output poisoned, synchronously
                        dx.copy_from_host(&x).unwrap();
                        dscale.copy_from_host(&scale).unwrap();
                        dout.copy_from_host(&vec![0xA5; n]).unwrap();
                        dout_t.copy_from_host(&vec![0xA5; n]).unwrap();
                        big.copy_from_host(&fill).unwrap();
                        damax
                            .copy_from_host(&[f32::from_bits(0xA5A5_A5A5)])
                            .unwrap();
                        if ct {
                            g.cast_transpose_scaled(
                                &p,
                                m,
                                k,
                                HpSrc::Bf16(dx.src()),
                                dscale.src(),
                                dout.dst(),
                                dout_t.dst(),
                                damax.dst(),
                                s.handle(),
                            )
                            .unwrap();
                        } else {
                            g.tensorwise_scaled(
                                &p,
                                n,
                                HpSrc::Bf16(dx.src()),
                                dscale.src(),
                                dout.dst(),
                                damax.dst(),
                                s.handle(),
                            )
                            .unwrap();
                        }
                        s.synchronize().unwrap();
                        let what = format!(
                            "thread {t} round {round} {}",
                            if ct {
                                "cast_transpose_scaled"
                            } else {
                                "tensorwise_scaled"
                            }
                        );
                        assert_eq!(
                            damax.to_vec().unwrap()[0].to_bits(),
                            amax[0].to_bits(),
                            "{what}: amax"
                        );
                        assert!(dout.to_vec().unwrap() == out, "{what}: out");
                        if ct {
                            assert!(dout_t.to_vec().unwrap() == out_t, "{what}: out_t");
                        }
                    }
                });
            }
        });
    }
}
