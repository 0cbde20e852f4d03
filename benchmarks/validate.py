"""Predicted vs measured step time and memory for every run of ../shared/validation.

Usage: python benchmarks/validate.py [--data DIR] [--all]   (--all also lists the 1,440 vTrain rows)
Prints one line per published run, MAPE per source and overall, memory errors where measured,
published runs predicted not to fit, and the share of same-model pairs ordered right.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.validation import TARGETS, evaluate, format_table, load_records, summarize  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--all", action="store_true", help="list every vTrain row too")
    args = ap.parse_args(argv)
    results = evaluate(load_records(args.data))
    summary = summarize(results)
    print(format_table(results, summary, per_record_vtrain=args.all))
    print()
    checks = {
        "overall MAPE <= 10%": summary["mape_overall"] <= TARGETS["mape_overall"],
        "every source MAPE <= 10%": max(summary["mape_by_source"].values()) <= TARGETS["mape_per_source"],
        "no record off by > 30%": not summary["over_30pct"],
        "memory within 10% where measured": not summary["memory_over_10pct"],
        "every published run predicted to fit": not summary["not_fitting"],
        "pair order >= 90%": summary["pair_order_right"] >= TARGETS["pair_order"],
    }
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}")


if __name__ == "__main__":
    main()
