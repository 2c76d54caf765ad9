"""Does the write-read result depend on where the stock cache buffer lands?

do_bench allocates a new 256 MiB cache on every call.  Under write-read, round means vary
from call to call (14.7-16.1 us on an H200) while the read-only policy stays at 15.4-15.6.
Here each trial allocates a cache at a new address (older ones are kept alive), then times
the GEMM in one event loop under the patched clear_cache, write-read and read-only, on
that cache.  Run on a GPU:  python benchmarks/placement.py
"""

import torch
import triton

import cleanflush
from cleanflush import _measure


def main(trials: int = 10, iters: int = 600) -> None:
    fn, _, _ = _measure.one_row_gemm(4096, 4096)
    driver = triton.runtime.driver.active
    _measure.warm_up(fn, 1.5)
    keep = []
    print("trial  cache address    write-read   read   (central means, us)")
    for trial in range(trials):
        cache = driver.get_empty_cache_for_benchmark()
        keep.append(cache)
        row = []
        for policy in ("write-read", "read"):
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            with cleanflush.policy(policy):
                for start, end in pairs:
                    driver.clear_cache(cache)
                    start.record()
                    fn()
                    end.record()
            torch.cuda.synchronize()
            row.append(_measure.central_mean([s.elapsed_time(e) * 1e3 for s, e in pairs]))
        print(f"{trial:5d}  {cache.data_ptr():#014x}  {row[0]:9.2f}  {row[1]:6.2f}")


if __name__ == "__main__":
    main()
