#!/usr/bin/env bash
# The GPU measurement of bench/gpu_compare.py, bench/host_profile.py and the gpu-marked tests, in
# one call on a GPU machine without a package index, after `bash .gpu/a/install.sh` on it
# (../shared/gpu/bundle.sh made .gpu/a and .gpu/b). The code before a change is compared from its
# wheel, .gpu/base/*.whl (`pip wheel --no-deps` of that commit's checkout), installed beside the
# bundle's: every version is timed in its own process, base and new alternately, twice.
#   bash bench/gpu_session.sh            # results under $OUT (or ./gpu-results)
set -u
OUT=${OUT:-gpu-results}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
bash .gpu/b/finish.sh || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/base_site .gpu/base/*.whl || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
lscpu | grep -E 'Model name|^CPU\(s\)' | tee -a "$OUT/gpu.txt"
git log -1 --format='%H %s' 2>/dev/null | tee -a "$OUT/gpu.txt"
for round in 1 2; do
  PYTHONPATH=/tmp/base_site:/tmp/site timeout 120 python3 bench/gpu_compare.py --label "base, round $round" \
    --json "$OUT/base$round.json" 2>&1 | tee -a "$OUT/compare.log"
  PYTHONPATH=/tmp/site timeout $([ "$round" = 2 ] && echo 150 || echo 90) python3 bench/gpu_compare.py --label "new, round $round" \
    $([ "$round" = 2 ] && echo --extras) --json "$OUT/new$round.json" 2>&1 | tee -a "$OUT/compare.log"
done
PYTHONPATH=/tmp/site timeout 100 python3 bench/host_profile.py --device cuda --model smollm2-135m \
  --envs 64 256 1024 --steps 10 2>&1 | tee "$OUT/host_profile.txt"
# The tests import textgym.cli, which only an install has (cli/ installs as textgym.cli), and the
# root conftest puts the checkout first: run them on a copy with cli/ in place.
rm -rf /tmp/full && mkdir -p /tmp/full && cp -r . /tmp/full/ && rm -rf /tmp/full/.gpu && cp -r cli /tmp/full/textgym/cli
(cd /tmp/full && PYTHONPATH=/tmp/site timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py) 2>&1 \
  | tail -25 | tee "$OUT/pytest_gpu.txt"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
print(f"\n{'envs':>6} " + " ".join(f"{k:>10}" for k in runs) + "   new/base (per round)")
for n in ("16", "256", "1024"):
    rates = {k: r["rollout"].get(n, {}).get("decisions_per_s") for k, r in runs.items()}
    ratios = [rates.get(f"new{i}") / rates[f"base{i}"] for i in (1, 2) if rates.get(f"base{i}") and rates.get(f"new{i}")]
    print(f"{n:>6} " + " ".join(f"{v or 0:>10,.0f}" for v in rates.values()) + "   " + ", ".join(f"{x:.2f}x" for x in ratios))
PY
