#!/usr/bin/env bash
# One prepared call for a session that is lent a GPU machine (docs/profile.md): the op sweep, timed both ways, and
# three end-to-end model labels, written where the device tool brings files back (at most 8 files, 2 folders deep:
# ops/rows.csv + ops/provenance.json, and label.json + provenance.json per model; the models' ONNX exports are made
# here afterwards with `lilou zoo export NAME --strip-weights` at the label's shapes).
#
#   run(command="bash scripts/device_profile.sh", timeout_s=540)
#
# Environment: OUT (the tool's output folder), DEVICE (default cuda; cpu for a dry run), OPS_ARGS (extra arguments of
# `lilou profile ops`), MODELS (semicolon-separated `lilou profile model` argument lists).
set -uo pipefail
out=${OUT:?set OUT to the folder the files go to}
device=${DEVICE:-cuda}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.
python=${PYTHON:-python3}
models=${MODELS:-"bert-base --batch 8 --seq 128;resnet50 --batch 32;gpt2 --batch 4 --seq 512"}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null || true
# shellcheck disable=SC2086  # OPS_ARGS is a list of arguments
timeout 420 "$python" -m lilou.cli profile ops --device "$device" --out "$out/ops" --timing both --quiet ${OPS_ARGS:-} \
    || echo "profile ops ended with status $?"
IFS=';' read -ra specs <<< "$models"
for spec in "${specs[@]}"; do
    read -ra words <<< "$spec"
    # shellcheck disable=SC2068
    timeout 60 "$python" -m lilou.cli profile model ${words[@]} --device "$device" --out "$out/model-${words[0]}" \
        --no-export --repeats 20 || echo "profile model ${words[0]} ended with status $?"
done
