#!/bin/sh
# Install hipfp8 for C/C++ users: include/hipfp8.h, libhipfp8.a, the shared library under
# its versioned SONAME libhipfp8.so.<HIPFP8_ABI_VERSION> with the libhipfp8.so link beside it,
# two pkg-config files, hipfp8.pc (shared library) and hipfp8-static.pc (static library), and a
# CMake package (lib/cmake/hipfp8: targets hipfp8::hipfp8 and hipfp8::hipfp8_static).
#
#   cargo build --release
#   scripts/install-c-lib.sh --prefix /usr/local          # or DESTDIR=... for packaging
#   cc app.c $(pkg-config --cflags --libs hipfp8)          # shared
#   cc app.c $(pkg-config --cflags --libs hipfp8-static)   # static
#   find_package(hipfp8 0.1 REQUIRED)                      # CMake (CMAKE_PREFIX_PATH=PREFIX)
#   target_link_libraries(app PRIVATE hipfp8::hipfp8)      #   or hipfp8::hipfp8_static
#
# Options: --prefix DIR (default /usr/local), --libdir DIR (default PREFIX/lib),
# --from DIR (where the built libraries are; default target/release).
# HIPFP8_NATIVE_STATIC_LIBS overrides the system libraries a static link needs (the
# `native-static-libs` rustc prints for the staticlib; by default the Linux list, plus the
# C++ and HIP runtimes when the archive is a GPU build).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
libdir=
from="$root/target/release"
destdir=${DESTDIR:-}
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "install-c-lib.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$libdir" ] || libdir="$prefix/lib"
# What a static link needs besides the archive: the Rust standard library's system libraries,
# plus, for a GPU build (its archive defines the runtime shim hipfp8_rt_*), the C++ runtime of
# the HIP/CUDA launchers and, for ROCm, libamdhip64 (CUDA's runtime is inside the archive).
libs_private="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
if command -v nm >/dev/null 2>&1 && [ -f "$from/libhipfp8.a" ]; then
    if nm --defined-only "$from/libhipfp8.a" 2>/dev/null | grep -q ' hipfp8_rt_malloc$'; then
        libs_private="-lstdc++ $libs_private"
        if nm --undefined-only "$from/libhipfp8.a" 2>/dev/null | grep -q ' hipMalloc$'; then
            libs_private="-lamdhip64 $libs_private"
        fi
    fi
fi
libs_private=${HIPFP8_NATIVE_STATIC_LIBS:-$libs_private}
version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)
abi=$(sed -n 's/^#define HIPFP8_ABI_VERSION \([0-9]*\)$/\1/p' "$root/include/hipfp8.h")
soname="libhipfp8.so.$abi"

for f in libhipfp8.a libhipfp8.so; do
    if [ ! -f "$from/$f" ]; then
        echo "install-c-lib.sh: $from/$f not found; run 'cargo build --release' first (or pass --from)" >&2
        exit 1
    fi
done

# The library's own SONAME (build.rs) must be the one this header's ABI version names.
if command -v readelf >/dev/null 2>&1; then
    built=$(readelf -d "$from/libhipfp8.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    if [ "$built" != "$soname" ]; then
        echo "install-c-lib.sh: $from/libhipfp8.so has SONAME '${built:-none}', expected $soname (stale build?)" >&2
        exit 1
    fi
fi

install -d "$destdir$prefix/include" "$destdir$libdir/pkgconfig" "$destdir$libdir/cmake/hipfp8"
install -m 644 "$root/include/hipfp8.h" "$destdir$prefix/include/hipfp8.h"
install -m 644 "$from/libhipfp8.a" "$destdir$libdir/libhipfp8.a"
rm -f "$destdir$libdir/libhipfp8.so"
install -m 755 "$from/libhipfp8.so" "$destdir$libdir/$soname"
ln -s "$soname" "$destdir$libdir/libhipfp8.so"
for pc in hipfp8 hipfp8-static; do
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
        -e "s|@LIBS_PRIVATE@|$libs_private|g" "$root/scripts/$pc.pc.in" >"$destdir$libdir/pkgconfig/$pc.pc"
done
# CMake: the private libraries of the static target as a CMake list.
cmake_libs=$(printf '%s' "$libs_private" | tr -s ' ' ';')
for f in hipfp8Config.cmake hipfp8ConfigVersion.cmake; do
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
        -e "s|@SONAME@|$soname|g" -e "s|@LIBS_PRIVATE@|$cmake_libs|g" \
        "$root/scripts/cmake/$f.in" >"$destdir$libdir/cmake/hipfp8/$f"
done
echo "installed hipfp8 $version into $destdir$prefix (pkg-config: $libdir/pkgconfig)"
