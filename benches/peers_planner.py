"""Contraction orders of opt_einsum and cotengra on the planner's quality networks.

Run by hand, in a virtual environment with `pip install opt_einsum cotengra kahypar`
(without kahypar, cotengra's `HyperOptimizer` falls back to label-propagation partitions):

    cargo run --release -p adrules-benches --bin planner-networks -- /tmp/networks.json
    python benches/peers_planner.py /tmp/networks.json [--hyper-seconds 10]

Every cost is the same measure as adrules' `NetworkPlan::cost`: the sum over the tree's
pairwise merges of the product of the dimensions of every label the merge touches
(multiply-adds), computed here from each peer's path, so the columns compare trees, not
cost conventions. adrules' own trees (written by `planner-networks`) are recounted the same
way, and the script stops if a count differs from adrules' by more than 1e-9 relative.
"""

import argparse
import json
import math
import time

import opt_einsum
import cotengra


def ssa_cost(inputs, output, sizes, ssa_path):
    """Cost of an SSA path (pairs of ids; new values get ids len(inputs), ...): a merge costs
    the product of the dimensions of every label it touches; its result keeps the labels in
    `output` or still held by another live value (as adrules' lowering)."""
    output = frozenset(output)
    values = [frozenset(x) for x in inputs]
    count = {}
    for v in values:
        for l in v:
            count[l] = count.get(l, 0) + 1
    total = 0
    for a, b in ssa_path:
        la, lb = values[a], values[b]
        touched = la | lb
        total += math.prod(sizes[l] for l in touched)
        for l in la:
            count[l] -= 1
        for l in lb:
            count[l] -= 1
        keep = frozenset(l for l in touched if l in output or count[l] > 0)
        for l in keep:
            count[l] += 1
        values.append(keep)
    return float(total)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("networks")
    p.add_argument("--hyper-seconds", type=float, default=10.0)
    p.add_argument(
        "--anneal",
        action="store_true",
        help="also anneal each cotengra trial (simulated_annealing_opts={}, besides the default subtree reconfiguration)",
    )
    args = p.parse_args()
    with open(args.networks) as f:
        nets = json.load(f)
    print("| network | peer | cost | planning |")
    print("|---|---|---:|---:|")
    for net in nets:
        inputs = [tuple(ax) for ax in net["labels"]]
        sizes = {l: net["dims"][l - 1] for ax in inputs for l in ax}
        for row in net["adrules"]:
            cost = "inf" if row["cost"] is None else f"{row['cost']:.3e}"
            # our tree recounted by this script's own costing, a check of adrules' count
            recount = ssa_cost(inputs, (), sizes, [tuple(m) for m in row["merges"]])
            if row["cost"] is not None and abs(recount - row["cost"]) > 1e-9 * recount:
                raise SystemExit(f"{net['name']}, {row['order']}: adrules counts {row['cost']:e}, this script {recount:e}")
            print(f"| {net['name']} | adrules {row['order']} | {cost} (recounted {recount:.3e}) | {row['seconds'] * 1e3:.1f} ms |")
        t = time.perf_counter()
        path = opt_einsum.paths.ssa_greedy_optimize(inputs, (), sizes)
        dt = time.perf_counter() - t
        print(f"| {net['name']} | opt_einsum greedy | {ssa_cost(inputs, (), sizes, path):.3e} | {dt * 1e3:.1f} ms |")
        t = time.perf_counter()
        extra = {"simulated_annealing_opts": {}, "reconf_opts": {}} if args.anneal else {}
        opt = cotengra.HyperOptimizer(max_time=args.hyper_seconds, max_repeats=10**6, progbar=False, minimize="flops", **extra)
        tree = opt.search(inputs, (), sizes)
        dt = time.perf_counter() - t
        cost = ssa_cost(inputs, (), sizes, tree.get_ssa_path())
        # cotengra's own count, as a cross-check of the conversion
        own = float(tree.contraction_cost())
        name = "cotengra HyperOptimizer" + (" + annealing" if args.anneal else "")
        print(f"| {net['name']} | {name} {args.hyper_seconds:g} s | {cost:.3e} (cotengra's count {own:.3e}) | {dt:.1f} s |")


if __name__ == "__main__":
    main()
