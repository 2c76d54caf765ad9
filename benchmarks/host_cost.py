"""Can the host fall behind the GPU under a cleanflush policy?

For each policy: the host time to enqueue one do_bench iteration (clear_cache, start event,
the GEMM, end event) against the GPU time that iteration takes.  If the host needs less
than the GPU, the queue stays full and no launch gap reaches the timed region.  Then ten
do_bench calls per policy, to show their call-to-call spread on this machine.
100 iterations stay under the launch-queue depth, so the host time is not held to the GPU.
Run on a GPU:  python benchmarks/host_cost.py
"""

import os
import statistics
import time

import torch
import triton
import triton.testing

import cleanflush
from cleanflush import _measure


def main(iters: int = 100) -> None:
    fn, _, _ = _measure.one_row_gemm(4096, 4096)
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    _measure.warm_up(fn, 1.5)
    for policy in cleanflush.POLICIES:  # first launches load the flush kernels: keep them out
        with cleanflush.policy(policy):
            driver.clear_cache(cache)
    torch.cuda.synchronize()
    print(torch.cuda.get_device_name(), f"cpus={os.cpu_count()} load={os.getloadavg()}")
    for policy in cleanflush.POLICIES:
        with cleanflush.policy(policy):
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(iters)]
            outer = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            torch.cuda.synchronize()
            outer[0].record()
            t0 = time.perf_counter()
            for start, end in events:
                driver.clear_cache(cache)
                start.record()
                fn()
                end.record()
            host_us = (time.perf_counter() - t0) / iters * 1e6
            outer[1].record()
            torch.cuda.synchronize()
            gpu_us = outer[0].elapsed_time(outer[1]) / iters * 1e3
            timed = _measure.central_mean([s.elapsed_time(e) * 1e3 for s, e in events])
            calls = [_measure.central_mean(triton.testing.do_bench(fn, return_mode="all")) * 1e3 for _ in range(10)]
        print(f"{policy:10s} host {host_us:6.1f} us/iter  gpu {gpu_us:6.1f} us/iter  timed {timed:6.2f} us  "
              f"do_bench x10: {min(calls):.2f}-{max(calls):.2f} (sd {statistics.pstdev(calls):.2f})")


if __name__ == "__main__":
    main()
