#!/usr/bin/env bash
# Where the backward's time goes by pass (issue 19, bwd window 1024): Nsight Compute's
# duration and DRAM bytes of each kernel of one atomic-mode backward call (BwdPre: D and
# the dQ accumulator zeroed; the main pass; BwdPost: dQ converted) for the windowed,
# causal and short unmasked rows (bf16 d128 b2 h16 8K, standard tile row; bench_window).
#
#   bash scripts/bwd_pass_times.sh OUT_DIR    (from target/gb; EXE=examples/bench_window_base
#                                              profiles another build's, BUNDLE_REVS)
set -u
cd "$(dirname "$0")/.."
OUT="${1:?usage: bwd_pass_times.sh OUT_DIR}"
mkdir -p "$OUT"
export BENCH_PASS=bwd BENCH_N="${BENCH_N:-8192}" BENCH_ROUNDS=1 BENCH_BWD_TILING=standard
for row in ${ROWS:-window1024 causal}; do
  BENCH_ROWS=$row timeout 120 ncu --clock-control none -k "regex:fa2_bwd" --launch-skip 6 --launch-count 3 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --page raw "${EXE:-examples/bench_window}" > "$OUT/$row.csv" 2> "$OUT/$row.err"
  echo "== $row rc=$?"
  python3 - "$OUT/$row.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if len(rows) < 3:
    print("  (no rows)"); sys.exit()
head, units, body = rows[0], rows[1], rows[2:]
col = {c: i for i, c in enumerate(head)}
tot = 0.0
for r in body:
    t = float(r[col["gpu__time_duration.sum"]].replace(",", ""))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[units[col["gpu__time_duration.sum"]]]
    us = t * scale
    tot += us
    def mb(c):
        v = float(r[col[c]].replace(",", ""))
        u = units[col[c]]
        return v * {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}.get(u, 1.0)
    rd, wr = mb("dram__bytes_read.sum"), mb("dram__bytes_write.sum")
    print(f"  {r[col['Kernel Name']][:44]:44} {us:9.1f} us  DRAM read {rd:8.1f} MB write {wr:8.1f} MB  {(rd + wr) / us:6.2f} TB/s")
print(f"  total {tot:.1f} us")
PY
done
