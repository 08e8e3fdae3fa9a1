"""How long the end of a local Ray takes: Ray's own stop (the anchor) against kgtuner's ``shutdown_ray``.

Each round starts a local Ray as a launch does (``connect_ray``: loopback, SIGTERM blocked in Ray's processes),
runs two actors, and times the stop; the two stops alternate, round by round, in one process. Prints each
round, the medians and their ratio.

    python scripts/perf/bench_ray_shutdown.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time


def one_round(fast: bool) -> float:
    import ray

    from kgtuner.cluster.ray_cluster import connect_ray, shutdown_ray

    connect_ray({"num_cpus": 2, "include_dashboard": False}, print_banner=False)

    @ray.remote(num_cpus=1)
    class Worker:
        def ping(self) -> int:
            return 1

    workers = [Worker.remote() for _ in range(2)]
    assert ray.get([w.ping.remote() for w in workers]) == [1, 1]
    del workers
    t0 = time.perf_counter()
    if fast:
        shutdown_ray()
    else:
        ray.shutdown()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"ray.shutdown (anchor)": [], "shutdown_ray": []}
    for r in range(args.rounds):
        for label, fast in (("ray.shutdown (anchor)", False), ("shutdown_ray", True)):
            times[label].append(one_round(fast))
            print(f"round {r + 1}: {label}: {times[label][-1]:.2f} s", flush=True)
    anchor, ours = (statistics.median(v) for v in times.values())
    print(f"median: ray.shutdown {anchor:.2f} s, shutdown_ray {ours:.2f} s; ratio {anchor / ours:.1f}x")


if __name__ == "__main__":
    main()
