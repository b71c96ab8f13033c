// kernel_abi.h -- numbers shared by every C++ launcher and src/sys.rs. docs/KERNEL_ABI.md is
// the prose version; src/runtime.rs has a test that these values match the Rust side.
#pragma once

// Launcher return values. 0 = success; > 0 = the runtime's own error code (hipError_t /
// cudaError_t, e.g. from the launch check); < 0 = hipfp8's argument checks below.
#define HIPFP8_KSTATUS_OK 0
#define HIPFP8_KSTATUS_INVALID_ENUM (-1)   // unknown format / dtype / mode id
#define HIPFP8_KSTATUS_INVALID_SHAPE (-2)  // negative or overflowing sizes
#define HIPFP8_KSTATUS_MISALIGNED (-3)     // a pointer lacks the alignment the kernel requires
#define HIPFP8_KSTATUS_UNSUPPORTED (-4)    // valid arguments this build/target does not implement
#define HIPFP8_KSTATUS_NULL_POINTER (-5)   // null pointer where elements are read or written
// -1000 (HIPFP8_KSTATUS_NOT_BUILT) is produced on the Rust side only, by the stub that
// stands in for a launcher that was not compiled into the library.

// FP8 element format ids = `Fp8Format as u32` in src/format.rs.
#define HIPFP8_FMT_E4M3FN 0
#define HIPFP8_FMT_E5M2 1
#define HIPFP8_FMT_E4M3FNUZ 2
#define HIPFP8_FMT_E5M2FNUZ 3

// High-precision input dtype ids (HpSrc in src/view.rs).
#define HIPFP8_DTYPE_BF16 0
#define HIPFP8_DTYPE_F32 1

// Memory copy directions of hipfp8_rt_memcpy*.
#define HIPFP8_COPY_H2D 1
#define HIPFP8_COPY_D2H 2
#define HIPFP8_COPY_D2D 3
