// launchers.h -- every extern "C" function of the kernel library, in one list: the family
// headers below hold the prototypes (each .hip file includes its family's header, so the
// compiler checks every definition). bindgen reads this file (with -DHIPFP8_BINDGEN, which
// makes the stream and event handles opaque pointers) to generate src/sys/launchers.rs;
// tests/sys_bindings.rs fails when the committed file drifts (BLESS=1 rewrites it).
#pragma once

#include "runtime.h"
#include "quant/launchers.h"
#include "grouped_gemm/launchers.h"
#include "moe/launchers.h"
#include "recipe/launchers.h"
#include "route/launchers.h"
