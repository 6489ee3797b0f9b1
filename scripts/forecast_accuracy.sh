#!/usr/bin/env bash
# Forecaster accuracy over profile folders: every application folder in POLLUX (Pollux layout,
# one node type) and in SIA (Sia layout, one placements-<node>.csv per node type), each fitted on
# all rows, single-node rows, and single-node rows plus two probes; and the bootstrap from every
# other node type of the same application, one at a time and all pooled. Prints mean, median and
# worst step-time MAPE per mode.
#
#   scripts/forecast_accuracy.sh [--tern BIN] [--pollux-accelerator NAME] POLLUX_DIR SIA_DIR
#   e.g. scripts/forecast_accuracy.sh ../shared/data/profiles/pollux-t4 ../shared/data/profiles/sia-multigpu
#
# A Pollux folder does not name its hardware; `tern forecast evaluate` reads it as the Pollux
# testbed's g4dn.12xlarge (4 x T4) unless --pollux-accelerator names another GPU (`unknown`
# gives the generic interconnect prior).
#
# Sia's `aws` node type is the Pollux g4dn.12xlarge again, so its fits are left out of the fit
# rows (they would count those nodes twice); it is still a bootstrap source and target.
set -euo pipefail
shopt -s nullglob
tern=tern
pollux_hw=()
while [[ "${1:-}" == --* ]]; do
    case $1 in
    --tern) tern=$2 ;;
    --pollux-accelerator) pollux_hw=(--accelerator "$2") ;;
    *)
        echo "unknown option $1" >&2
        exit 2
        ;;
    esac
    shift 2
done
if [[ $# -ne 2 ]]; then
    echo "usage: $0 [--tern BIN] [--pollux-accelerator NAME] POLLUX_DIR SIA_DIR" >&2
    exit 2
fi
pollux=$1
sia=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# One JSON line per case: {"mode": ..., "case": ..., "mape": ...}.
evaluate() {
    local mode=$1 name=$2
    shift 2
    local mape
    if ! mape=$("$tern" forecast evaluate "$@" --json 2>/dev/null | tail -1 |
        python3 -c 'import json,sys; v=json.load(sys.stdin)["mape"]; print("null" if v is None else v)'); then
        echo "forecast evaluate failed: $*" >&2
        return 1
    fi
    printf '{"mode":"%s","case":"%s","mape":%s}\n' "$mode" "$name" "$mape" >>"$out"
}

for dir in "$pollux"/*/; do
    app=$(basename "$dir")
    [[ -f "$dir/placements.csv" ]] || continue
    for fit in all probes single-node; do
        evaluate "$fit" "pollux/$app" --profile "$dir" --fit-on "$fit" "${pollux_hw[@]}"
    done
done
for dir in "$sia"/*/; do
    app=$(basename "$dir")
    nodes=$(find "$dir" -maxdepth 1 -name 'placements-*.csv' -printf '%f\n' |
        sed 's/^placements-//; s/\.csv$//' | sort)
    for g in $nodes; do
        if [[ $g != aws ]]; then
            for fit in all probes single-node; do
                evaluate "$fit" "sia/$app/$g" --profile "$dir" --gpu "$g" --fit-on "$fit"
            done
        fi
        donors=()
        for s in $nodes; do
            # dgx-ext is the dgx hardware again: not a second source, nor a pair with dgx.
            [[ $s == "$g" || $s == dgx-ext || "$g/$s" == dgx-ext/dgx ]] && continue
            donors+=("$s")
            evaluate bootstrap "sia/$app/$g<-$s" --profile "$dir" --gpu "$g" --bootstrap-from "$s"
        done
        if ((${#donors[@]} > 1)); then
            list=$(
                IFS=,
                echo "${donors[*]}"
            )
            evaluate bootstrap-pooled "sia/$app/$g<-$list" --profile "$dir" --gpu "$g" \
                --bootstrap-from "$list"
        fi
    done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'fit on':16} {'cases':>5} {'mean':>7} {'median':>7} {'worst':>7}  worst case")
def line(label, v):
    m = [r["mape"] for r in v]
    w = max(v, key=lambda r: r["mape"])
    print(f"{label:16} {len(m):5} {statistics.mean(m):6.1f}% {statistics.median(m):6.1f}% "
          f"{w['mape']:6.1f}%  {w['case']}")
for mode in ["all", "probes", "single-node", "bootstrap", "bootstrap-pooled"]:
    v = [r for r in rows if r["mode"] == mode and r["mape"] is not None]
    if not v:
        continue
    line(mode, v)
    for src in ["pollux", "sia"]:
        part = [r for r in v if r["case"].startswith(src + "/")]
        if part and len(part) < len(v):
            line(f"  {src}", part)
EOF
