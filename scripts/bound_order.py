"""Count the dominance pairs whose 90 % bounds are out of order (docs/intervals.md, session 39).

A device dominates another when it is never predicted slower (a slice's whole GPU or larger slice; a board of the
same compute capability with at least every resource: ``lilou.latency.composition.monotone.dominates``). Its upper
bound should be at most the other's, its lower bound at most the other's too. Prints, per model, batch and precision,
the pairs whose estimates, upper or lower bounds are out of order, and the worst ratio of upper bounds.

    python scripts/bound_order.py MODEL.onnx [MODEL.onnx ...] [--batches 1,8] [--precisions fp32,fp16]

The models need a free batch dimension (``lilou zoo export resnet50 --dynamic-batch --strip-weights -o r50.onnx``).
"""
from __future__ import annotations

import argparse
import itertools

from lilou import Predictor
from lilou.api import rank_devices
from lilou.latency.composition.monotone import dominates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--precisions", default="fp32,fp16")
    args = parser.parse_args()
    predictor = Predictor()
    devices = rank_devices(None)
    pairs = [(big, small) for big, small in itertools.permutations(devices, 2) if dominates(big, small)]
    for model in args.models:
        for batch in (int(b) for b in args.batches.split(",")):
            for precision in args.precisions.split(","):
                by_name = {d.name: p for d, p in zip(devices, predictor.predict_many(model, devices, batch=batch,
                                                                                       precision=precision))}
                point = upper = lower = 0
                worst = 1.0
                for big, small in pairs:
                    b, s = by_name[big.name], by_name[small.name]
                    point += b.latency_ms > s.latency_ms * (1 + 1e-9)
                    upper += b.interval_ms[1] > s.interval_ms[1] * (1 + 1e-6)
                    lower += b.interval_ms[0] > s.interval_ms[0] * (1 + 1e-6)
                    worst = max(worst, b.interval_ms[1] / s.interval_ms[1])
                print(f"{model} batch {batch} {precision}: {len(pairs)} pairs, estimates out of order {point}, "
                      f"upper bounds {upper}, lower bounds {lower}; worst upper-bound ratio {worst:.3f}")


if __name__ == "__main__":
    main()
