#!/usr/bin/env python3
"""Seeded synthetic spot traces for checking deadline policies on data not in the repository.

Writes one Can't Be Late JSON file per zone (`<zone>_h100_1.json`, with `metadata.zone`,
`region`, `cloud`, `price_info` and a per-tick `prices` series), for `tern simulate --trace`.
Thirteen GCP-named zones in five regions, shaped after what the GCP H100 traces look like:
  - capacity: a zone is up when both its region's and its own two-state chain are up; the
    region's runs last 6-72 h up and 0.5-12 h down, a zone's 0.5-33 h up and 0.3-10 h down
    (log-uniform per zone), so zones of a region fail together and some runs are short;
  - on-demand: the region's list price for an 8 x H100 machine, within -3 %/+5 % per zone;
  - spot: 25-50 % of the zone's on-demand price at the start, then a random walk in log space
    (`--walk` per step, one step every `--step-ticks` ticks; 0 keeps it flat), kept within
    15-80 % of on-demand.
Nothing here is fitted to tern: the ranges are the generator's only knobs.
"""
import argparse
import json
import math
import os
import random

REGIONS = {  # region: (zones, on-demand $/h for an 8 x H100 machine)
    "us-central1": ("abc", 88.25),
    "us-east4": ("abc", 91.10),
    "us-west1": ("ab", 88.25),
    "europe-west4": ("abc", 97.20),
    "asia-southeast1": ("bc", 101.50),
}


def chain(rng, ticks, gap_s, mean_up_h, mean_down_h):
    """Two-state availability: per-tick chances of ending a run of each state."""
    end_up = 1 - math.exp(-gap_s / 3600 / mean_up_h)
    end_down = 1 - math.exp(-gap_s / 3600 / mean_down_h)
    up = rng.random() < mean_up_h / (mean_up_h + mean_down_h)
    out = []
    for _ in range(ticks):
        out.append(up)
        up = (rng.random() >= end_up) if up else (rng.random() < end_down)
    return out


def log_uniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def prices(rng, ticks, od, walk, step_ticks):
    p = od * rng.uniform(0.25, 0.5)
    out = []
    for t in range(ticks):
        if walk > 0 and t % step_ticks == 0:
            p = min(max(p * math.exp(rng.gauss(0, walk)), 0.15 * od), 0.8 * od)
        out.append(round(p, 3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True, help="directory to write the zone files to")
    ap.add_argument("--gap-seconds", type=int, default=600)
    ap.add_argument("--days", type=float, default=45)
    ap.add_argument("--walk", type=float, default=0.01, help="sd of one log-price step")
    ap.add_argument("--step-ticks", type=int, default=1, help="ticks between price steps")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ticks = int(a.days * 86400 / a.gap_seconds)
    os.makedirs(a.out, exist_ok=True)
    for region, (zones, od_list) in REGIONS.items():
        region_up = chain(rng, ticks, a.gap_seconds, rng.uniform(6, 72), rng.uniform(0.5, 12))
        for letter in zones:
            zone_up = chain(rng, ticks, a.gap_seconds,
                            log_uniform(rng, 0.5, 33), log_uniform(rng, 0.3, 10))
            od = od_list * rng.uniform(0.97, 1.05)
            series = prices(rng, ticks, od, a.walk, max(a.step_ticks, 1))
            zone = f"{region}-{letter}"
            doc = {
                "metadata": {
                    "gap_seconds": a.gap_seconds, "zone": zone, "region": region, "cloud": "gcp",
                    "price_info": {"price": series[0], "on_demand_price": round(od, 3)},
                },
                "data": [int(r and z) for r, z in zip(region_up, zone_up)],
                "prices": series,
            }
            with open(os.path.join(a.out, f"{zone}_h100_1.json"), "w") as f:
                json.dump(doc, f)


if __name__ == "__main__":
    main()
