#!/usr/bin/env python3
"""Per-kernel time of an `ncu --csv --metrics gpu__time_duration.sum` log (scripts/gpu_flash_bench.sh with
FLASH_PROFILE): kernels grouped by name, their total time, launches and share of the total, largest first.
   python3 bench/model/ncu_summary.py ncu.csv [--steps N]   (N: decode steps in the log; times are per step)"""
import argparse
import csv
import collections
import re

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    if name.endswith(")"):  # drop the argument list: the balanced (...) at the end
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r"\((int|bool|unsigned int|long)\)", "", name)  # ncu writes template values as (int)128
    name = name.split(" ")[-1] if "<" not in name else name[name.rfind(" ", 0, name.index("<")) + 1:]
    head, sep, args = name.partition("<")
    return head.split("::")[-1] + sep + args  # template values kept: they tell instantiations apart


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args()
    with open(args.log, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages are not CSV rows
    total = collections.Counter()
    count = collections.Counter()
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(row["Metric Value"].replace(",", "")) * UNITS[row["Metric Unit"]]
        k = short(row["Kernel Name"])
        total[k] += us / args.steps
        count[k] += 1
    whole = sum(total.values())
    if not whole:
        raise SystemExit("no kernel times in " + args.log)
    print(f"| kernel | us per step | launches per step | share |\n|---|---|---|---|")
    for k, us in total.most_common():
        print(f"| {k} | {us:.1f} | {count[k] / args.steps:g} | {100 * us / whole:.1f}% |")
    print(f"| **all kernels** | **{whole:.1f}** | {sum(count.values()) / args.steps:g} | |")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head
        pass
