#!/usr/bin/env bash
# isa-report.sh -- read the machine code of every hipfp8 kernel and write bench/isa.md.
#
#   scripts/isa-report.sh [OBJ_DIR] [OUT_MD]
#
# OBJ_DIR (default .gpu/ci/objs) holds what build.rs exports with HIPFP8_EXPORT_OBJECTS=OBJ_DIR:
# rocm/*.o + rocm/manifest.tsv (required) and cuda/*.o + cuda/manifest.tsv (optional). When
# rocm/manifest.tsv is missing, the ROCm objects are built first (build.rs inside the sid
# root, `cargo check`, objects come from the cache when unchanged).
#
# AMD (every target in the manifest, e.g. gfx942 and gfx950): the device code object of each
# translation unit is unbundled from the host object's .hip_fatbin section; per kernel the
# AMDGPU metadata gives VGPRs, AGPRs, SGPRs, LDS bytes, scratch bytes, spills; the disassembly
# gives hardware FP8 conversions (v_cvt_pk_fp8_f32, v_cvt_pk_bf8_f32, v_cvt_sr_*, gfx950's
# v_cvt_scalef32_*), FP8 MFMAs (gfx950's f8f6f4 with its operand format fields cbsz (A) and blgp
# (B) where not E4M3: cbsz:1 / blgp:1 = E5M2) and 16-byte global loads/stores
# (global/buffer_*_dwordx4).
# FAILS (exit 1, after writing the report) when any AMD kernel uses scratch: private segment
# > 0, dynamic stack, VGPR spills, or scratch_* instructions. (SGPR spills, which go to VGPR
# lanes rather than memory, are listed but do not fail.)
# A known, accepted exception is listed in bench/isa-allow.txt (one line per exception:
# `<target> <source> <kernel name prefix>  # why`; the check then reports it as ALLOWED
# instead of failing, and fails if a listed exception no longer occurs, so the list cannot go
# stale). The list is empty unless someone commits an entry: keep it that way.
# NVIDIA (sm_90, when exported): registers, stack, local and shared memory from cuobjdump,
# F2FP (hardware FP8 conversion) and 128-bit LDG/STG counts from the SASS; reported, not fatal.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OBJ_DIR=${1:-$ROOT/.gpu/ci/objs}
OUT_MD=${2:-$ROOT/bench/isa.md}
OBJ_DIR=$(mkdir -p "$OBJ_DIR" && cd "$OBJ_DIR" && pwd)
# The tools may be wrappers into the sid root: make our paths visible there.
export HIP_SID_BINDS="$OBJ_DIR:$ROOT${HIP_SID_BINDS:+:$HIP_SID_BINDS}"
t0=$(date +%s)
log() { echo "[isa-report +$(( $(date +%s) - t0 ))s] $*" >&2; }

if [ ! -f "$OBJ_DIR/rocm/manifest.tsv" ]; then
  log "no ROCm objects in $OBJ_DIR: building them in the sid root"
  command -v hip-sid-run >/dev/null || { echo "hip-sid-run not found: run scripts/setup-hip-sid.sh" >&2; exit 2; }
  (cd "$ROOT" && HIPFP8_BACKEND=rocm HIPFP8_EXPORT_OBJECTS="$OBJ_DIR" CARGO_TARGET_DIR="$ROOT/target/sid-rocm" \
    hip-sid-run cargo check --offline --lib -q)
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hipfp8-isa.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The tools' own temporary files (cuobjdump hands each cubin to nvdisasm through one) stay in
# WORK, and the dumps are kept gzip-compressed (~2.4 GB of text otherwise): the report must
# not depend on how much room /tmp has while CI builds the torch environment beside it.
mkdir -p "$WORK/tmp"
export TMPDIR="$WORK/tmp"
# dump OUT.gz CMD...: CMD's stdout compressed into OUT.gz; one retry after a failure (a tool
# that fails twice ends the report with the free space printed, since a full disk is the
# usual cause of a truncated temporary file).
dump() {
  local out=$1 try; shift
  for try in 1 2; do
    if "$@" | gzip -1 > "$out"; then return 0; fi
    echo "isa-report: '$*' failed (try $try); free space:" >&2
    df -h "$WORK" >&2 || true
    sleep 5
  done
  return 1
}

# ---- AMD: unbundle, read metadata, disassemble (one pass per object and target)
mkdir -p "$WORK/amd"
while IFS=$'\t' read -r src obj targets launchers; do
  case "$src" in ''|'#'*) continue ;; esac
  base=${obj%.o}
  llvm-readelf -S "$OBJ_DIR/rocm/$obj" > "$WORK/amd/$base.sections"
  if ! grep -q '\.hip_fatbin' "$WORK/amd/$base.sections"; then
    log "$src: no device code (host-only translation unit)"
    continue
  fi
  llvm-objcopy --dump-section=.hip_fatbin="$WORK/amd/$base.fatbin" "$OBJ_DIR/rocm/$obj" "$WORK/amd/$base.stripped.o"
  rm -f "$WORK/amd/$base.stripped.o"
  IFS=';' read -ra tl <<< "$targets"
  for t in "${tl[@]}"; do
    co="$WORK/amd/$base.$t.co"
    clang-offload-bundler --unbundle --type=o --targets="hipv4-amdgcn-amd-amdhsa--$t" \
      --input="$WORK/amd/$base.fatbin" --output="$co"
    llvm-readelf --notes "$co" > "$co.notes"
    dump "$co.s.gz" llvm-objdump -d --mcpu="$t" "$co"
    rm -f "$co"
    printf '%s\t%s\t%s\t%s\n' "$src" "$t" "$co.notes" "$co.s.gz" >> "$WORK/amd/index.tsv"
  done
  rm -f "$WORK/amd/$base.fatbin"
done < "$OBJ_DIR/rocm/manifest.tsv"
log "AMD code objects disassembled"

# ---- NVIDIA: resource usage and SASS
if [ -f "$OBJ_DIR/cuda/manifest.tsv" ]; then
  CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo "${CUDA_HOME:-/opt/cudatc/cuda}/bin/cuobjdump")}
  if [ -x "$CUOBJDUMP" ]; then
    mkdir -p "$WORK/cuda"
    while IFS=$'\t' read -r src obj targets launchers; do
      case "$src" in ''|'#'*) continue ;; esac
      base=${obj%.o}
      "$CUOBJDUMP" --dump-resource-usage "$OBJ_DIR/cuda/$obj" > "$WORK/cuda/$base.res"
      dump "$WORK/cuda/$base.sass.gz" "$CUOBJDUMP" -sass "$OBJ_DIR/cuda/$obj"
      printf '%s\t%s\t%s\t%s\n' "$src" "$targets" "$WORK/cuda/$base.res" "$WORK/cuda/$base.sass.gz" >> "$WORK/cuda/index.tsv"
    done < "$OBJ_DIR/cuda/manifest.tsv"
    log "NVIDIA objects dumped"
  else
    log "cuobjdump not found: NVIDIA section skipped"
  fi
fi

HIPCC_VERSION=$( (hipcc --version 2>/dev/null || true) | grep -m1 -i "clang version" || true)
NVCC_VERSION=$( ("${CUDA_HOME:-/opt/cudatc/cuda}/bin/nvcc" --version 2>/dev/null || true) | tail -1)
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(cd "$ROOT" && git status --porcelain -- hip 2>/dev/null | head -c1)

ALLOW=${ISA_ALLOW:-$ROOT/bench/isa-allow.txt}
export WORK OUT_MD HIPCC_VERSION NVCC_VERSION COMMIT DIRTY ALLOW
python3 - <<'PY'
import gzip, os, re, subprocess, sys

work = os.environ["WORK"]

def demangle(names):
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout.split("\n")
        return {n: (out[i] if i < len(out) and out[i] else n) for i, n in enumerate(names)}
    except Exception:
        return {n: n for n in names}

def short(sig, limit=110):
    # "hipfp8_x_kernel(unsigned int const*, ...)" -> "hipfp8_x_kernel", template arguments
    # kept but cut at `limit` characters (CK's run to thousands).
    depth, i = 0, 0
    for i, c in enumerate(sig):
        if c == "<": depth += 1
        elif c == ">": depth -= 1
        elif c == "(" and depth == 0:
            sig = sig[:i]
            break
    return sig if len(sig) <= limit else sig[:limit - 3] + "..."

def parse_notes(path):
    """Kernel-level keys of the AMDGPU metadata (YAML as llvm-readelf prints it)."""
    kernels, cur, in_kernels = [], None, False
    for line in open(path):
        s = line.rstrip("\n")
        if s.startswith("amdhsa.kernels:"):
            in_kernels = True
            continue
        if in_kernels and s and not s.startswith(" "):
            in_kernels = False
        if not in_kernels:
            continue
        m = re.match(r"^  - (\.\w+):\s*(.*)$", s)
        if m:
            cur = {}
            kernels.append(cur)
            cur[m.group(1)] = m.group(2).strip()
            continue
        m = re.match(r"^    (\.\w+):\s*(.*)$", s)
        if m and cur is not None:
            cur[m.group(1)] = m.group(2).strip()
    return kernels

FP8_ENC = re.compile(r"\bv_cvt_(?:scalef32_)?(?:pk|sr)_(?:fp8|bf8)_\w+")
FP8_DEC = re.compile(r"\bv_cvt_(?:scalef32_)?(?:pk_)?f(?:32|16)_(?:fp8|bf8)\w*")
MFMA_F8 = re.compile(r"\bv_mfma_\w*(?:fp8|bf8|f8f6f4)\w*")
LOAD16 = re.compile(r"\b(?:global|buffer|flat)_load_(?:dwordx4|b128)\b")
STORE16 = re.compile(r"\b(?:global|buffer|flat)_store_(?:dwordx4|b128)\b")
SCRATCH = re.compile(r"\bscratch_(?:load|store)\w*")
MFMA_FMT = re.compile(r"\b(?:cbsz|blgp):\d+")

def parse_disasm(path):
    funcs, cur = {}, None
    for line in gzip.open(path, "rt"):
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line.strip())
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is not None and line.startswith("\t"):
            ins = line.strip().split("//")[0].strip()
            if ins:
                cur.append(ins)
    # Code objects pad functions with s_nop after s_endpgm: not part of the kernel.
    for ins in funcs.values():
        while ins and ins[-1].startswith("s_nop"):
            ins.pop()
    return funcs

def count(rx, ins):
    names = {}
    for i in ins:
        for m in rx.findall(i):
            names[m] = names.get(m, 0) + 1
    return names

def count_mfma(ins):
    """FP8 MFMAs by name plus the operand format fields the disassembly prints (non-zero only)."""
    names = {}
    for i in ins:
        m = MFMA_F8.search(i)
        if m:
            key = " ".join([m.group(0)] + MFMA_FMT.findall(i))
            names[key] = names.get(key, 0) + 1
    return names

def fmt_counts(d):
    return ", ".join(f"{k} x{v}" for k, v in sorted(d.items())) if d else "-"

allow = []
if os.path.exists(os.environ.get("ALLOW", "")):
    for line in open(os.environ["ALLOW"]):
        line = line.split("#", 1)[0].strip()
        if line:
            t, src, kern = line.split(None, 2)
            allow.append([t, src, kern.strip(), 0])

rows, failures, allowed = [], [], []
idx = os.path.join(work, "amd", "index.tsv")
entries = [l.rstrip("\n").split("\t") for l in open(idx)] if os.path.exists(idx) else []
all_names = []
parsed = []
for src, target, notes, asm in entries:
    ks = parse_notes(notes)
    funcs = parse_disasm(asm)
    parsed.append((src, target, ks, funcs))
    all_names += [k.get(".name", "?") for k in ks]
dm = demangle(sorted(set(all_names)))
for src, target, ks, funcs in parsed:
    for k in ks:
        name = k.get(".name", "?")
        sym = k.get(".symbol", name).removesuffix(".kd")
        ins = funcs.get(sym, [])
        scratch = int(k.get(".private_segment_fixed_size", "0") or 0)
        dyn = k.get(".uses_dynamic_stack", "false") == "true"
        vsp = int(k.get(".vgpr_spill_count", "0") or 0)
        ssp = int(k.get(".sgpr_spill_count", "0") or 0)
        sins = count(SCRATCH, ins)
        r = dict(
            src=src, target=target, kernel=short(dm.get(name, name)),
            vgpr=k.get(".vgpr_count", "?"), agpr=k.get(".agpr_count", "0"), sgpr=k.get(".sgpr_count", "?"),
            lds=k.get(".group_segment_fixed_size", "?"), scratch=scratch, spills=f"{vsp}/{ssp}",
            wg=k.get(".max_flat_workgroup_size", "?"), wave=k.get(".wavefront_size", "?"),
            enc=fmt_counts(count(FP8_ENC, ins)), dec=fmt_counts(count(FP8_DEC, ins)),
            mfma=fmt_counts(count_mfma(ins)), ld16=sum(count(LOAD16, ins).values()),
            st16=sum(count(STORE16, ins).values()), n=len(ins),
        )
        problems = []
        if scratch > 0: problems.append(f"{scratch} B scratch")
        if dyn: problems.append("dynamic stack")
        if vsp: problems.append(f"spills {vsp} VGPR")
        # SGPR spills with no private segment land in VGPR lanes (v_writelane/v_readlane), not
        # in scratch memory: reported, not failed. With a private segment they are caught above.
        lane_note = f" ({ssp} SGPRs spilled to VGPR lanes, no memory)" if ssp and not scratch else ""
        if ssp and scratch: problems.append(f"spills {ssp} SGPR to scratch")
        if sins: problems.append(fmt_counts(sins))
        if not ins: problems.append("no disassembly found for the kernel symbol")
        hit = next((a for a in allow if a[0] == target and a[1] == src and dm.get(name, name).startswith(a[2])), None)
        if problems and hit:
            hit[3] += 1
            r["status"] = "ALLOWED (bench/isa-allow.txt): " + "; ".join(problems)
            allowed.append(f"{target} {src} {r['kernel']}: {'; '.join(problems)}")
        elif problems:
            r["status"] = "FAIL: " + "; ".join(problems)
            failures.append(f"{target} {src} {r['kernel']}: {'; '.join(problems)}")
        else:
            r["status"] = "ok" + lane_note
        rows.append(r)

# NVIDIA
crows = []
cidx = os.path.join(work, "cuda", "index.tsv")
centries = [l.rstrip("\n").split("\t") for l in open(cidx)] if os.path.exists(cidx) else []
cnames, cparsed = [], []
for src, targets, res, sass in centries:
    usage, cur = {}, None
    for line in open(res):
        m = re.match(r"^\s*Function (\S+):$", line)
        if m:
            cur = m.group(1)
            continue
        if cur and "REG:" in line:
            usage[cur] = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            cur = None
    funcs, cur, arch = {}, None, "?"
    for line in gzip.open(sass, "rt"):
        m = re.match(r"^\s*code for (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"^\s*Function : (\S+)", line)
        if m:
            cur = funcs.setdefault((arch, m.group(1)), [])
            continue
        m = re.match(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append(m.group(1))
    cparsed.append((src, usage, funcs))
    cnames += [n for (_, n) in funcs]
cdm = demangle(sorted(set(cnames)))
for src, usage, funcs in cparsed:
    for (arch, name), ins in sorted(funcs.items()):
        u = usage.get(name, {})
        f2fp = sum(1 for i in ins if "F2FP" in i and ("E4M3" in i or "E5M2" in i))
        ldg = sum(1 for i in ins if re.search(r"\bLDG\.E\.(?:128|ENL2\.256)|\bLDG\.E\.[A-Z.]*128", i))
        stg = sum(1 for i in ins if re.search(r"\bSTG\.E\.[A-Z.]*128", i))
        local = int(u.get("LOCAL", "0")) + int(u.get("STACK", "0"))
        crows.append(dict(src=src, arch=arch, kernel=short(cdm.get(name, name)), reg=u.get("REG", "?"),
                          stack=u.get("STACK", "?"), local=u.get("LOCAL", "?"), shared=u.get("SHARED", "?"),
                          f2fp=f2fp, ldg=ldg, stg=stg, n=len(ins),
                          status="local memory!" if local else "ok"))

rows.sort(key=lambda r: (r["src"], r["kernel"], r["target"]))
crows.sort(key=lambda r: (r["src"], r["kernel"], r["arch"]))
out = []
w = out.append
w("# Kernel ISA report")
w("")
w("Generated by `scripts/isa-report.sh` (run by `.ci/gpu-compile-checks.sh`) from the objects")
w("build.rs compiles (HIPFP8_EXPORT_OBJECTS). Do not edit by hand; CI regenerates it and says when it changed.")
w(f"AMD: {os.environ.get('HIPCC_VERSION') or 'hipcc'}. NVIDIA: {os.environ.get('NVCC_VERSION') or 'nvcc'}.")
w("")
w("Columns: VGPR/AGPR/SGPR as allocated; LDS = static shared memory (bytes); scratch = private")
w("segment bytes (must be 0: the check fails otherwise, as it does on VGPR spills, a dynamic stack")
w("or scratch_* instructions; SGPR spills into VGPR lanes touch no memory and are listed, not")
w("failed); WG = max flat workgroup size the code was compiled for (1024 unless")
w("`__launch_bounds__` says otherwise); FP8 enc/dec = hardware conversion instructions; FP8 MFMA =")
w("FP8 matrix instructions (gfx950's f8f6f4 with its operand format fields where not E4M3:")
w("cbsz = A, blgp = B, 1 = E5M2);")
w("ld16/st16 = 16-byte global (or buffer) loads/stores; instrs = instructions in the kernel body.")
w("")
w("## AMD (gfx942 = MI300X, FNUZ hardware conversion; gfx950 = MI355X, OCP)")
w("")
w("| source | kernel | target | VGPR | AGPR | SGPR | LDS | scratch | spills v/s | WG | FP8 enc | FP8 dec | FP8 MFMA | ld16 | st16 | instrs | check |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    w(f"| {r['src']} | `{r['kernel']}` | {r['target']} | {r['vgpr']} | {r['agpr']} | {r['sgpr']} | {r['lds']} | {r['scratch']} | {r['spills']} | {r['wg']} | {r['enc']} | {r['dec']} | {r['mfma']} | {r['ld16']} | {r['st16']} | {r['n']} | {r['status']} |")
if not rows:
    w("| (no kernels) | | | | | | | | | | | | | | | | |")
if crows:
    w("")
    w("## NVIDIA (sm_90 = H100/H200)")
    w("")
    w("F2FP = hardware FP8 conversion (`F2FP.SATFINITE.E4M3/E5M2`); ldg128/stg128 = 16-byte global loads/stores.")
    w("")
    w("| source | kernel | arch | REG | STACK | LOCAL | SHARED | F2FP | ldg128 | stg128 | instrs | check |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in crows:
        w(f"| {r['src']} | `{r['kernel']}` | {r['arch']} | {r['reg']} | {r['stack']} | {r['local']} | {r['shared']} | {r['f2fp']} | {r['ldg']} | {r['stg']} | {r['n']} | {r['status']} |")
w("")
w(f"AMD kernels: {len(rows)} (kernel x target), scratch failures: {len(failures)}, allowed by bench/isa-allow.txt: {len(allowed)}. NVIDIA kernels: {len(crows)}.")
for a in allow:
    if a[3] == 0:
        failures.append(f"bench/isa-allow.txt entry matches no kernel with scratch any more: {' '.join(a[:3])} (remove it)")
open(os.environ["OUT_MD"], "w").write("\n".join(out) + "\n")
print(f"isa-report: {len(rows)} AMD kernel/target pairs, {len(crows)} NVIDIA kernels -> {os.environ['OUT_MD']}")
if failures:
    print("isa-report: FAIL: scratch use (or unreadable code) in AMD kernels:", file=sys.stderr)
    for f in failures:
        print("  " + f, file=sys.stderr)
    sys.exit(1)
PY
