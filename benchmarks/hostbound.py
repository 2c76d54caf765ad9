"""Is the per-call spread after a read flush the host falling behind the GPU?

do_bench's loop (clear_cache, start, call, end) three ways, per flush (stock, read, write-read):
- as it is;
- host-bound on purpose: the host busy-waits 150 us after each end event, so every
  iteration is issued just in time to an idle GPU (the timed part of the iteration is issued
  exactly as before);
- GPU-bound on purpose: a 200 us ``torch.cuda._sleep`` before each flush (outside the timed
  region, no memory traffic), so the host is always far ahead.
Per call: central mean, p5, and the median period between consecutive start events on the
GPU against the GPU work per iteration (period > work means the GPU waited for the host).
Run on a GPU, from the repository root:  python -m benchmarks.hostbound
"""

import statistics
import time

import torch
import triton

from benchmarks.common import central_mean, flushing, spin_cycles_per_us
from cleanflush import _measure


def loop(flush, fn, iters, host_wait_us=0.0, gpu_pad_cycles=0):
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    for s, e in pairs:
        if gpu_pad_cycles:
            torch.cuda._sleep(gpu_pad_cycles)
        flush()
        s.record()
        fn()
        e.record()
        if host_wait_us:
            until = time.perf_counter() + host_wait_us * 1e-6
            while time.perf_counter() < until:
                pass
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in pairs)
    period = statistics.median(pairs[i][0].elapsed_time(pairs[i + 1][0]) * 1e3 for i in range(iters - 1))
    return central_mean(us), us[len(us) // 20], period


def main(rounds=6, iters=300):
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    pad = int(200 * spin_cycles_per_us())
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for n, k in [(4096, 4096), (28672, 4096)]:
        fn, _, _ = _measure.one_row_gemm(n, k)
        _measure.warm_up(fn, 1.0)
        rows = {}
        for _ in range(rounds):
            for policy in ("stock", "read", "write-read"):
                for mode, kw in (
                    ("as is", {}),
                    ("host-bound", {"host_wait_us": 150}),
                    ("GPU-bound", {"gpu_pad_cycles": pad}),
                ):
                    with flushing(policy):
                        rows.setdefault((policy, mode), []).append(
                            loop(lambda: driver.clear_cache(cache), fn, iters, **kw)
                        )
        for (policy, mode), xs in rows.items():
            means = [x[0] for x in xs]
            print(
                f"{n}x{k} {policy:6s} {mode:10s} mean {statistics.median(means):7.2f} "
                f"(rounds {min(means):.2f}-{max(means):.2f}, "
                f"sd {statistics.pstdev(means):.2f})  p5 {statistics.median(x[1] for x in xs):7.2f}  "
                f"period {statistics.median(x[2] for x in xs):7.1f} us"
            )


if __name__ == "__main__":
    main()
