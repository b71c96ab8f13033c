//! The GPU chain on a real device: discovery, native format, buffers, copies, streams, events,
//! the self-test kernels, pointer checks, error plumbing, and rowwise_2d GPU == CPU.
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (with HIPFP8_REQUIRE_GPU=1 it fails instead); with one,
//! every check below must hold.

use hipfp8::device::{
    self, DeviceBuffer, Event, Stream, Vendor, arch_native_fnuz, gpu_for_tests,
    native_format_for_arch, selftest_fill, selftest_pattern, selftest_wave,
};
use hipfp8::{
    BackendKind, CastParams, Context, Device, Error, FormatChoice, Fp8Format, HpSrc, Loc, Src, bf16,
};

#[test]
fn discovery_and_properties() {
    let Some(ctx) = gpu_for_tests("discovery_and_properties") else {
        return;
    };
    let n = Device::count().unwrap();
    assert!(n >= 1);
    let all = Device::all().unwrap();
    assert_eq!(all.len(), n);
    for d in &all {
        println!(
            "GPU {}: {} arch={} vendor={:?} CUs={} wave={} cc={:?} mem={:.1} GiB L2={} MiB smem/block={} (optin {}) pci={}",
            d.ordinal,
            d.name,
            d.arch,
            d.vendor,
            d.compute_units,
            d.wavefront_size,
            d.compute_capability,
            d.total_memory as f64 / (1u64 << 30) as f64,
            d.l2_cache_bytes >> 20,
            d.shared_mem_per_block,
            d.shared_mem_per_block_optin,
            d.pci_bus_id
        );
        assert!(!d.name.is_empty());
        assert!(d.compute_units > 0);
        assert!(d.total_memory > (1 << 30));
        assert!(d.max_threads_per_block >= 256);
        match d.vendor {
            Vendor::Nvidia => {
                assert_eq!(d.wavefront_size, 32);
                assert_eq!(
                    d.arch,
                    format!("sm_{}{}", d.compute_capability.0, d.compute_capability.1)
                );
            }
            Vendor::Amd => {
                assert!(d.arch.starts_with("gfx"), "{}", d.arch);
                if d.arch.starts_with("gfx9") {
                    assert_eq!(d.wavefront_size, 64);
                }
            }
        }
    }
    let (drv, rt) = device::runtime_versions().unwrap();
    println!(
        "driver {drv}, runtime {rt}; library built for {} {}",
        device::built_backend(),
        device::built_targets()
    );
    assert!(drv > 0 && rt > 0);

    assert_eq!(ctx.backend(), BackendKind::Gpu);
    assert_eq!(ctx.loc(), Loc::Device);
    assert_eq!(ctx.ordinal(), Some(0));
    assert_eq!(ctx.arch(), all[0].arch);
    assert_eq!(ctx.device().unwrap().unwrap(), all[0]);
    assert_eq!(Context::best().backend(), BackendKind::Gpu);
    assert!(matches!(Device::get(n), Err(Error::BackendUnavailable(_))));
    assert!(matches!(
        Context::gpu(n + 7),
        Err(Error::BackendUnavailable(_))
    ));
}

#[test]
fn native_format_on_real_device() {
    let Some(ctx) = gpu_for_tests("native_format_on_real_device") else {
        return;
    };
    let d = ctx.device().unwrap().unwrap();
    let want = native_format_for_arch(&d.arch);
    assert_eq!(ctx.native_format(), want);
    assert_eq!(d.native_format(), want);
    assert_eq!(ctx.resolve(FormatChoice::Auto), want);
    let e5 = if arch_native_fnuz(&d.arch) {
        Fp8Format::E5M2FnUz
    } else {
        Fp8Format::E5M2
    };
    assert_eq!(ctx.resolve(FormatChoice::AutoE5M2), e5);
    // Independent of the arch table: NVIDIA is OCP; an MI300-family part is FNUZ.
    match d.vendor {
        Vendor::Nvidia => assert_eq!(ctx.native_format(), Fp8Format::E4M3Fn),
        Vendor::Amd if ["gfx940", "gfx941", "gfx942"].contains(&d.base_arch()) => {
            assert_eq!(ctx.native_format(), Fp8Format::E4M3FnUz)
        }
        Vendor::Amd => assert_eq!(ctx.native_format(), Fp8Format::E4M3Fn),
    }
    println!("{} ({}): native {:?}", d.name, d.arch, ctx.native_format());
}

#[test]
fn buffers_and_copies() {
    let Some(ctx) = gpu_for_tests("buffers_and_copies") else {
        return;
    };
    for n in [0usize, 1, 3, 4097, 1 << 20] {
        let host: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
        let b = DeviceBuffer::from_host(&ctx, &host).unwrap();
        assert_eq!(b.len(), n);
        assert_eq!(b.to_vec().unwrap(), host, "u8 roundtrip n={n}");
        let mut c = DeviceBuffer::<u8>::alloc(&ctx, n).unwrap();
        c.copy_from(&b).unwrap();
        assert_eq!(c.to_vec().unwrap(), host, "D2D n={n}");
        c.fill_bytes(0xA5).unwrap();
        assert!(c.to_vec().unwrap().iter().all(|&v| v == 0xA5));
        let z = DeviceBuffer::<u8>::zeroed(&ctx, n).unwrap();
        assert!(z.to_vec().unwrap().iter().all(|&v| v == 0));
    }
    // Typed buffers keep every bit (NaN payloads, -0, subnormals).
    let f: Vec<f32> = [
        0.0f32,
        -0.0,
        1.5,
        f32::NAN,
        f32::INFINITY,
        f32::MIN_POSITIVE / 8.0,
    ]
    .into_iter()
    .chain([f32::from_bits(0x7fc0_1234), f32::from_bits(0xffff_ffff)])
    .collect();
    let fb = DeviceBuffer::from_host(&ctx, &f).unwrap();
    let back = fb.to_vec().unwrap();
    assert_eq!(
        back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        f.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    let h: Vec<bf16> = (0..1000u16)
        .map(|i| bf16::from_bits(i.wrapping_mul(65)))
        .collect();
    let hb = DeviceBuffer::from_host(&ctx, &h).unwrap();
    assert_eq!(
        hb.to_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>(),
        h.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    let mut out = vec![bf16::ZERO; 1000];
    hb.copy_to_host(&mut out).unwrap();
    assert_eq!(
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        h.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );

    // Views carry the device location and length; ranges are bounds-checked.
    let mut vb = DeviceBuffer::<f32>::zeroed(&ctx, 10).unwrap();
    assert_eq!(vb.src().loc(), Loc::Device);
    assert_eq!(vb.src().len(), 10);
    assert_eq!(vb.dst().loc(), Loc::Device);
    assert_eq!(vb.src_range(2..5).unwrap().len(), 3);
    assert_eq!(
        vb.src_range(2..5).unwrap().as_ptr(),
        vb.as_ptr().wrapping_add(2)
    );
    assert!(vb.src_range(5..11).is_err());
    assert!(vb.dst_range(11..11).is_err());
    // Wrong lengths are refused before any copy.
    assert!(matches!(
        vb.copy_from_host(&[1.0; 9]),
        Err(Error::InvalidShape(_))
    ));
    assert!(matches!(
        vb.copy_to_host(&mut [0.0; 11]),
        Err(Error::InvalidShape(_))
    ));
}

#[test]
fn selftest_kernel_pattern() {
    let Some(ctx) = gpu_for_tests("selftest_kernel_pattern") else {
        return;
    };
    // Sizes around the block size, and one past the kernel's 8192-block grid cap so the
    // grid-stride loop runs more than once.
    for (n, seed) in [
        (1usize, 0u32),
        (255, 1),
        (256, 2),
        (257, 3),
        (1 << 20 | 3, 4),
        (8192 * 256 * 2 + 5, 0xDEAD_BEEF),
    ] {
        let mut out = DeviceBuffer::<u32>::alloc(&ctx, n).unwrap();
        selftest_fill(
            &ctx,
            None,
            &mut out,
            seed,
            Stream::default_stream().handle(),
        )
        .unwrap();
        let got = out.to_vec().unwrap();
        let bad = (0..n)
            .filter(|&i| got[i] != selftest_pattern(0, i as u64, seed))
            .count();
        assert_eq!(bad, 0, "fill n={n}: {bad} wrong elements");
        // With an input: out = in + pattern (reads device input, writes another buffer).
        let input: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(7)).collect();
        let ib = DeviceBuffer::from_host(&ctx, &input).unwrap();
        selftest_fill(
            &ctx,
            Some(&ib),
            &mut out,
            seed,
            Stream::default_stream().handle(),
        )
        .unwrap();
        let got = out.to_vec().unwrap();
        let bad = (0..n)
            .filter(|&i| got[i] != selftest_pattern(input[i], i as u64, seed))
            .count();
        assert_eq!(bad, 0, "fill+input n={n}: {bad} wrong elements");
    }
    // Zero elements: nothing launched, success.
    let mut empty = DeviceBuffer::<u32>::alloc(&ctx, 0).unwrap();
    selftest_fill(&ctx, None, &mut empty, 0, Stream::default_stream().handle()).unwrap();
}

#[test]
fn wave_size_matches_device() {
    let Some(ctx) = gpu_for_tests("wave_size_matches_device") else {
        return;
    };
    let d = ctx.device().unwrap().unwrap();
    let (compiled, hw) = selftest_wave(&ctx).unwrap();
    println!(
        "HIPFP8_WAVE = {compiled}, warpSize = {hw}, props = {}",
        d.wavefront_size
    );
    assert_eq!(
        compiled as u32, d.wavefront_size,
        "port.h's HIPFP8_WAVE disagrees with the device"
    );
    assert_eq!(hw as u32, d.wavefront_size);
}

#[test]
fn streams_events_and_async_copies() {
    let Some(ctx) = gpu_for_tests("streams_events_and_async_copies") else {
        return;
    };
    let n = 1usize << 22;
    let seed = 99;
    let input: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5555).collect();
    let mut out_host = vec![0u32; n];

    for non_blocking in [false, true] {
        let s = if non_blocking {
            Stream::new_non_blocking(&ctx)
        } else {
            Stream::new(&ctx)
        }
        .unwrap();
        assert!(s.is_owned());
        assert!(!s.raw().is_null());
        let mut ib = DeviceBuffer::<u32>::alloc(&ctx, n).unwrap();
        let mut ob = DeviceBuffer::<u32>::alloc(&ctx, n).unwrap();
        // SAFETY: `input` and `out_host` outlive the copies; the stream is synchronised
        // before either is read or dropped.
        unsafe { ib.copy_from_host_async(&input, &s).unwrap() };
        selftest_fill(&ctx, Some(&ib), &mut ob, seed, &s).unwrap();
        // SAFETY: as above.
        unsafe { ob.copy_to_host_async(&mut out_host, &s).unwrap() };
        s.synchronize().unwrap();
        assert!(s.is_idle().unwrap());
        let bad = (0..n)
            .filter(|&i| out_host[i] != selftest_pattern(input[i], i as u64, seed))
            .count();
        assert_eq!(bad, 0, "stream (non_blocking={non_blocking}): {bad} wrong");
    }

    // A borrowed stream (as a framework hands one in) is used but not destroyed on drop.
    let owner = Stream::new(&ctx).unwrap();
    {
        // SAFETY: `owner` outlives the borrowed handle.
        let borrowed = unsafe { Stream::borrowed(owner.raw()) };
        assert!(!borrowed.is_owned());
        let mut ob = DeviceBuffer::<u32>::alloc(&ctx, 1000).unwrap();
        selftest_fill(&ctx, None, &mut ob, 5, &borrowed).unwrap();
        borrowed.synchronize().unwrap();
        assert_eq!(ob.to_vec().unwrap()[999], selftest_pattern(0, 999, 5));
    }
    let mut ob = DeviceBuffer::<u32>::alloc(&ctx, 10).unwrap();
    selftest_fill(&ctx, None, &mut ob, 6, &owner).unwrap();
    owner
        .synchronize()
        .expect("the owner's stream must survive dropping a borrowed handle");

    // Cross-stream ordering through an event: B copies what A produced.
    let (a, b) = (
        Stream::new_non_blocking(&ctx).unwrap(),
        Stream::new_non_blocking(&ctx).unwrap(),
    );
    let big = 1usize << 24;
    let mut src = DeviceBuffer::<u32>::alloc(&ctx, big).unwrap();
    let mut dst = DeviceBuffer::<u32>::zeroed(&ctx, big).unwrap();
    let produced = Event::new(&ctx).unwrap();
    selftest_fill(&ctx, None, &mut src, 1234, &a).unwrap();
    produced.record(&a).unwrap();
    b.wait_event(&produced).unwrap();
    dst.copy_from_async(&src, &b).unwrap();
    b.synchronize().unwrap();
    let got = dst.to_vec().unwrap();
    let bad = (0..big)
        .filter(|&i| got[i] != selftest_pattern(0, i as u64, 1234))
        .count();
    assert_eq!(bad, 0, "event ordering between streams: {bad} wrong");

    // Events time work: a 1 GiB device-to-device copy and a 256 MiB fill.
    let s = Stream::new(&ctx).unwrap();
    let bytes = 1usize << 30;
    let cs = DeviceBuffer::<u8>::zeroed(&ctx, bytes).unwrap();
    let mut cd = DeviceBuffer::<u8>::alloc(&ctx, bytes).unwrap();
    let (e0, e1) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());
    cd.copy_from_async(&cs, &s).unwrap(); // warm-up
    let reps = 5;
    e0.record(&s).unwrap();
    for _ in 0..reps {
        cd.copy_from_async(&cs, &s).unwrap();
    }
    e1.record(&s).unwrap();
    e1.synchronize().unwrap();
    let ms = e0.elapsed_ms(&e1).unwrap() / reps as f32;
    assert!(ms > 0.0);
    println!(
        "D2D copy 1 GiB: {ms:.3} ms = {:.0} GB/s (read + write)",
        2.0 * bytes as f64 / (ms as f64 * 1e6)
    );
    let fill_n = 1usize << 26;
    let mut fb = DeviceBuffer::<u32>::alloc(&ctx, fill_n).unwrap();
    selftest_fill(&ctx, None, &mut fb, 0, &s).unwrap();
    e0.record(&s).unwrap();
    selftest_fill(&ctx, None, &mut fb, 1, &s).unwrap();
    e1.record(&s).unwrap();
    e1.synchronize().unwrap();
    let ms = e0.elapsed_ms(&e1).unwrap();
    assert!(ms > 0.0);
    println!(
        "selftest fill 256 MiB: {ms:.3} ms = {:.0} GB/s written",
        (fill_n * 4) as f64 / (ms as f64 * 1e6)
    );
}

#[test]
fn pointer_checks_and_errors() {
    let Some(ctx) = gpu_for_tests("pointer_checks_and_errors") else {
        return;
    };
    let dev = DeviceBuffer::<f32>::zeroed(&ctx, 16).unwrap();
    let host = [0f32; 16];
    ctx.check_device_pointers(&[("dev", dev.as_ptr() as *const _)])
        .unwrap();
    assert!(matches!(
        ctx.check_device_pointers(&[("host", host.as_ptr() as *const _)]),
        Err(Error::WrongLocation(_))
    ));
    // Host memory disguised as a device view is refused before any kernel runs.
    let mut out = DeviceBuffer::<u8>::alloc(&ctx, 16).unwrap();
    let mut sc = DeviceBuffer::<f32>::alloc(&ctx, 1).unwrap();
    // SAFETY: the pointer is valid host memory; the op must refuse it, not read it.
    let fake = unsafe { Src::from_raw(host.as_ptr(), 16, Loc::Device) };
    let r = ctx.rowwise_2d(
        &CastParams::default(),
        1,
        16,
        HpSrc::F32(fake),
        out.dst(),
        sc.dst(),
        Default::default(),
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    // Host views are refused by location.
    let r = ctx.rowwise_2d(
        &CastParams::default(),
        1,
        16,
        (&host[..]).into(),
        out.dst(),
        sc.dst(),
        Default::default(),
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    // A CPU context refuses device views.
    let r = Context::cpu().rowwise_2d(
        &CastParams::default(),
        1,
        16,
        (&dev).into(),
        out.dst(),
        sc.dst(),
        Default::default(),
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    // Runtime errors come back as Error::Device with the runtime's message.
    // SAFETY: plain call with an invalid ordinal; the shim reports it as a status.
    let st = unsafe { hipfp8::sys::hipfp8_rt_set_device(10_000) };
    match device::check_status("set_device(10000)", st) {
        Err(Error::Device { code, msg }) => {
            assert!(code > 0);
            assert!(msg.len() > "set_device(10000): ".len(), "{msg}");
            println!("expected runtime error: {msg}");
        }
        other => panic!("{other:?}"),
    }
    // The failed call must not poison later work.
    let mut ob = DeviceBuffer::<u32>::alloc(&ctx, 3).unwrap();
    selftest_fill(&ctx, None, &mut ob, 1, Stream::default_stream().handle()).unwrap();
    assert_eq!(ob.to_vec().unwrap()[2], selftest_pattern(0, 2, 1));
}

// ------------------------------------------------------------------------------------- rowwise_2d

/// xorshift64*: deterministic test data without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f32_in(&mut self, lo_exp: i32, hi_exp: i32) -> f32 {
        let r = self.next();
        let e = lo_exp + (r % (hi_exp - lo_exp + 1) as u64) as i32;
        let frac = ((r >> 20) & 0x7f_ffff) as f32 / (1u32 << 23) as f32;
        let s = if r >> 63 == 1 { -1.0 } else { 1.0 };
        s * (1.0 + frac) * (e as f32).exp2()
    }
}

/// Rows of random data with per-row magnitudes, then adversarial rows: zeros, NaN, +-Inf,
/// bf16 max, subnormals, a lone huge value, ties.
fn test_matrix(m: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed | 1);
    let mut x = Vec::with_capacity(m * k);
    for i in 0..m {
        let base = (r.next() % 60) as i32 - 30;
        for j in 0..k {
            let v = match i % 9 {
                1 => 0.0,
                2 if j == k / 2 => f32::NAN,
                3 if j == k - 1 => f32::INFINITY,
                4 if j == 0 => f32::NEG_INFINITY,
                5 => {
                    if j % 2 == 0 {
                        bf16::MAX.to_f32()
                    } else {
                        -bf16::MAX.to_f32()
                    }
                }
                6 => r.f32_in(-133, -127), // f32/bf16 subnormals
                7 if j == 0 => 3.0e38,
                8 => (j % 7) as f32 * 0.5 - 1.5, // exact ties after scaling
                _ => r.f32_in(base - 4, base + 4),
            };
            x.push(v);
        }
    }
    x
}

/// f32 scales equal bit for bit, NaN payloads included: a NaN row's scale is the canonical
/// 0x7FC00000 on every backend (docs/OPS.md; CUDA's f64 division alone would give
/// 0x7FFFFFFF, so the kernels fix the payload). Returns how many NaN scales differed only in
/// payload (always 0 when it returns). The message names the first 8 differences.
fn assert_scales_eq(gpu: &[f32], cpu: &[f32], what: &str) -> usize {
    assert_eq!(gpu.len(), cpu.len());
    let bad: Vec<String> = (0..gpu.len())
        .filter(|&i| gpu[i].to_bits() != cpu[i].to_bits())
        .map(|i| {
            format!(
                "[{i}] GPU {:e} ({:#010x}) CPU {:e} ({:#010x})",
                gpu[i],
                gpu[i].to_bits(),
                cpu[i],
                cpu[i].to_bits()
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} scales differ: {}",
        bad.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join("; ")
    );
    (0..gpu.len())
        .filter(|&i| gpu[i].to_bits() != cpu[i].to_bits())
        .count()
}

#[test]
fn rowwise_2d_gpu_matches_cpu() {
    let Some(ctx) = gpu_for_tests("rowwise_2d_gpu_matches_cpu") else {
        return;
    };
    if !device::has_launcher("hipfp8_rowwise_2d_launch") {
        device::skip_test(
            "rowwise_2d_gpu_matches_cpu",
            "hipfp8_rowwise_2d_launch is not in this build",
        );
        return;
    }
    let cpu = Context::cpu();
    let stream = Stream::new(&ctx).unwrap();
    let shapes = [
        (1usize, 1usize),
        (3, 17),
        (5, 160),
        (9, 1000),
        (217, 256),
        (64, 7168),
        (2, 70001),
        (33, 4096),
    ];
    let mut cases = 0;
    let mut nan_payload_diffs = 0;
    for (si, &(m, k)) in shapes.iter().enumerate() {
        let xf = test_matrix(m, k, 0x1234 + si as u64);
        let xb: Vec<bf16> = xf.iter().map(|&v| bf16::from_f32(v)).collect();
        let dxf = DeviceBuffer::from_host(&ctx, &xf).unwrap();
        let dxb = DeviceBuffer::from_host(&ctx, &xb).unwrap();
        for fmt in Fp8Format::ALL {
            for pow2 in [false, true] {
                for bf in [true, false] {
                    let p = CastParams::new(fmt, pow2);
                    let (mut co, mut cs) = (vec![0u8; m * k], vec![0f32; m]);
                    let cx: HpSrc = if bf { (&xb).into() } else { (&xf).into() };
                    cpu.rowwise_2d(
                        &p,
                        m,
                        k,
                        cx,
                        (&mut co).into(),
                        (&mut cs).into(),
                        Default::default(),
                    )
                    .unwrap();
                    // Oversized outputs with sentinels: nothing past m*k / m may be written.
                    let mut go = DeviceBuffer::<u8>::alloc(&ctx, m * k + 64).unwrap();
                    let mut gs = DeviceBuffer::<f32>::alloc(&ctx, m + 8).unwrap();
                    go.fill_bytes(0xA5).unwrap();
                    gs.fill_bytes(0xA5).unwrap();
                    let gx: HpSrc = if bf { (&dxb).into() } else { (&dxf).into() };
                    ctx.rowwise_2d(&p, m, k, gx, go.dst(), gs.dst(), stream.handle())
                        .unwrap();
                    stream.synchronize().unwrap();
                    let (o, s) = (go.to_vec().unwrap(), gs.to_vec().unwrap());
                    let what = format!(
                        "{m}x{k} {fmt:?} pow2={pow2} {}",
                        if bf { "bf16" } else { "f32" }
                    );
                    let diff = (0..m * k).filter(|&i| o[i] != co[i]).count();
                    assert_eq!(
                        diff,
                        0,
                        "{what}: {diff} fp8 bytes differ (first at {:?})",
                        (0..m * k).find(|&i| o[i] != co[i])
                    );
                    nan_payload_diffs += assert_scales_eq(&s[..m], &cs, &what);
                    assert!(
                        o[m * k..].iter().all(|&b| b == 0xA5),
                        "{what}: wrote past m*k"
                    );
                    assert!(
                        s[m..].iter().all(|v| v.to_bits() == 0xA5A5_A5A5),
                        "{what}: wrote past m scales"
                    );
                    cases += 1;
                }
            }
        }
    }
    // Misaligned views (one element in): the launcher must handle them or refuse them.
    let (m, k) = (4, 300);
    let xb: Vec<bf16> = test_matrix(m, k + 1, 77)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let dx = DeviceBuffer::from_host(&ctx, &xb).unwrap();
    // zeroed: the spare byte is copied back too (compute-sanitizer initcheck)
    let mut go = DeviceBuffer::<u8>::zeroed(&ctx, m * k + 1).unwrap();
    let mut gs = DeviceBuffer::<f32>::zeroed(&ctx, m).unwrap();
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    let r = ctx.rowwise_2d(
        &p,
        m,
        k,
        HpSrc::Bf16(dx.src_range(1..m * k + 1).unwrap()),
        go.dst_range(1..m * k + 1).unwrap(),
        gs.dst(),
        stream.handle(),
    );
    match r {
        Ok(()) => {
            stream.synchronize().unwrap();
            let (mut co, mut cs) = (vec![0u8; m * k], vec![0f32; m]);
            cpu.rowwise_2d(
                &p,
                m,
                k,
                (&xb[1..m * k + 1]).into(),
                (&mut co).into(),
                (&mut cs).into(),
                Default::default(),
            )
            .unwrap();
            assert_eq!(
                &go.to_vec().unwrap()[1..],
                &co[..],
                "misaligned views: data differ"
            );
            nan_payload_diffs += assert_scales_eq(&gs.to_vec().unwrap(), &cs, "misaligned views");
            println!("misaligned views: handled, exact");
        }
        Err(Error::Misaligned(msg)) => println!("misaligned views: refused ({msg})"),
        Err(e) => panic!("misaligned views: {e}"),
    }
    println!(
        "rowwise_2d GPU == CPU on {cases} cases ({} shapes x 4 formats x pow2 x 2 dtypes); \
         NaN scales differing only in NaN payload: {nan_payload_diffs}",
        shapes.len()
    );
}
