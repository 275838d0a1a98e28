#!/usr/bin/env bash
# scripts/sass-stats.sh — what a CUDA kernel compiles to, without a GPU: compiles one .cu of
# src/backend/cuda with the build's flags (build-cuda's include options, -O3 -arch=sm_90 -fmad=false),
# disassembles it (cuobjdump + nvdisasm from NVIDIA's PyPI wheels, pinned with their hashes in
# requirements-sass.lock and installed into .venv-sass on first use) and prints per kernel: registers,
# spills, shared memory, SASS instructions, and for each loop (a backward branch spanning at least
# --min-loop instructions, default 40; --innermost: only those with no such loop inside) its length and
# instruction mix over every path. --out FILE keeps the SASS.
#
#   scripts/sass-stats.sh src/backend/cuda/matmul_mma.cu [--kernel REGEX] [--min-loop N] [--innermost] [--out FILE]
#
# Why: GPU time is scarce; counting what a loop issues per block (an address conversion per cp.async,
# a software f16 conversion, register moves around a merge) can be done here. The 2026-12-07 session
# found the tensor-core loaders' per-copy generic-to-shared conversions this way (~150 of ~350
# instructions per block). Needs nvcc and a configured build-cuda (scripts/test-cuda.sh --configure-only);
# the wheels need PyPI once (the lock pins them), nothing else does.
set -euo pipefail
cd "$(dirname "$0")/.."
src="" kernel="" min_loop=40 out="" innermost=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kernel=$2; shift ;;
    --min-loop) min_loop=$2; shift ;;
    --out) out=$2; shift ;;
    --innermost) innermost=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "sass-stats.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) src=$1 ;;
  esac
  shift
done
[ -n "$src" ] && [ -f "$src" ] || { echo "sass-stats.sh: give a .cu file (see --help)" >&2; exit 2; }
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
rsp=${BUILD_DIR:-build-cuda}/src/backend/cuda/CMakeFiles/dsv4_backend_cuda.dir/includes_CUDA.rsp
[ -f "$rsp" ] || { echo "sass-stats.sh: $rsp not found (run scripts/test-cuda.sh --configure-only)" >&2; exit 2; }
venv=.venv-sass
want=$(sha256sum requirements-sass.lock | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.lock.sha" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes -r requirements-sass.lock
  echo "$want" > "$venv/.lock.sha"
fi
bin=$("$venv/bin/python" -c 'import nvidia, pathlib; print(next(pathlib.Path(p) for p in nvidia.__path__) / "cu13" / "bin")')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
abs=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")
rsp_abs=$(cd "$(dirname "$rsp")" && pwd)/includes_CUDA.rsp
if ! (cd "$(dirname "$rsp")/../.." && "$NVCC" --options-file "$rsp_abs" -O3 -DNDEBUG -arch=sm_90 -fmad=false \
  --expt-relaxed-constexpr -std=c++20 --resource-usage -c "$abs" -o "$tmp/k.o") 2> "$tmp/ptxas.txt"; then
  cat "$tmp/ptxas.txt" >&2
  exit 1
fi
PATH="$bin:$PATH" cuobjdump -sass "$tmp/k.o" > "$tmp/k.sass"
[ -n "$out" ] && cp "$tmp/k.sass" "$out"
python3 - "$tmp/k.sass" "$tmp/ptxas.txt" "$kernel" "$min_loop" "$innermost" <<'PY'
import re, sys, collections
sass, ptxas, pattern, min_loop = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3], int(sys.argv[4])
innermost = sys.argv[5] == '1'
# ptxas --resource-usage: "Compiling entry function 'NAME'" then its registers / spills / smem.
usage, name = {}, None
for line in ptxas.splitlines():
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m: name = m.group(1); continue
    if name and 'spill' in line: usage.setdefault(name, {})['spill'] = line.split(',', 1)[1].strip() if ',' in line else line.strip()
    m = re.search(r'Used (\d+) registers.*?(\d+) bytes smem', line)
    if name and m: usage.setdefault(name, {}).update(regs=int(m.group(1)), smem=int(m.group(2)))
    elif name and 'Used' in line and 'registers' in line: usage.setdefault(name, {})['regs'] = int(re.search(r'Used (\d+)', line).group(1))
def opcode(text):
    t = text.split()
    op = t[1] if t[0].startswith('@') else t[0]
    return op.split('.')[0]
for func in re.split(r'\n\s*Function : ', sass)[1:]:
    fname = func.split('\n', 1)[0].strip()
    if pattern and not re.search(pattern, fname): continue
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', func)]
    u = usage.get(fname, {})
    print(f"{fname}\n  {len(ins)} instructions, {u.get('regs', '?')} registers, {u.get('smem', 0)} bytes static smem"
          f"{', ' + u['spill'] if 'spill' in u and not u['spill'].startswith('0 bytes spill stores, 0 bytes spill loads') else ''}")
    loops = []
    for a, t in ins:
        m = re.search(r'BRA (0x[0-9a-f]+)', t)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            body = [x for x in ins if lo <= x[0] <= a]
            if len(body) >= min_loop: loops.append((lo, a, body))
    # --innermost: only loops with no other loop of --min-loop instructions inside (an unrolled loop's
    # early exits give many back edges over nested bodies).
    if innermost:
        loops = [l for l in loops if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    seen = set()  # the same body reached by several back edges: print it once
    for lo, hi, body in sorted(loops, key=lambda l: l[0]):
        mix = collections.Counter(opcode(t) for _, t in body)
        key = (len(body), mix.most_common(3)[0])
        if key in seen: continue
        seen.add(key)
        top = ', '.join(f'{k} {v}' for k, v in mix.most_common(12))
        print(f"  loop {lo:#x}-{hi:#x}: {len(body)} instructions (every path) — {top}")
PY
