"""Any job of benchmarks/jobs as one rank of a distributed job: the process group is made first
(gloo, as ``torchrun`` asks), so that cleanflush agrees the job's picks through its store, then
the job runs as its own ``__main__``, timed.  Nothing here waits for another rank.

    torchrun --nproc-per-node 4 -m benchmarks.jobs.ranked gemlite_decode

With ``RANKED_OUT`` set, each rank writes ``rank-N.json`` there: its rank and the job's wall
time in it (its tuning, mostly).
"""

import json
import os
import runpy
import sys
import time

import torch.distributed as dist


def main() -> None:
    job = sys.argv[1]
    dist.init_process_group("gloo")
    started = time.perf_counter()
    sys.argv = [job]
    runpy.run_module(f"benchmarks.jobs.{job}", run_name="__main__")
    took = time.perf_counter() - started
    out = os.environ.get("RANKED_OUT")
    if out:
        with open(os.path.join(out, f"rank-{dist.get_rank()}.json"), "w", encoding="utf-8") as f:
            json.dump({"rank": dist.get_rank(), "world": dist.get_world_size(), "job_s": took}, f)


if __name__ == "__main__":
    main()
