"""Why is do_bench under write-read ~1 us above the read-only flush on an H200?

One process, interleaved rounds, the same event loop for every flush variant, so the only
difference between rows is what runs before the start event.  Prints means, medians and IQRs (us).
CUDA event timestamps tick in steps of about 1 us on this GPU, so a median of samples is
quantised to that step; the mean of many samples is not.
Run on a GPU:  python benchmarks/policy_gap.py
"""

import statistics

import torch
import triton
import triton.testing

import cleanflush
from cleanflush import _flush, _measure

MiB = 1 << 20


def main(rounds: int = 7, iters: int = 400) -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    fn, _, _ = _measure.one_row_gemm(4096, 4096)
    zbuf = torch.empty(256 * MiB // 4, dtype=torch.int32, device=dev)
    rbuf, sink, l2 = _flush.prepare(dev)
    other = torch.zeros(256 * MiB // 4, dtype=torch.float32, device=dev)
    osink = torch.zeros((), device=dev)

    def rd(buf, s, nbytes):
        torch.sum(buf[: nbytes // 4], dim=0, out=s)

    variants = {
        "read 256M": lambda: rd(rbuf, sink, 256 * MiB),
        "zero 256M + read 2xL2": lambda: (zbuf.zero_(), rd(rbuf, sink, 2 * l2)),
        "zero 256M + read 256M": lambda: (zbuf.zero_(), rd(rbuf, sink, 256 * MiB)),
        "zero 256M + read 2xL2 + read 256M other": lambda: (zbuf.zero_(), rd(rbuf, sink, 2 * l2), rd(other, osink, 256 * MiB)),
        "read 256M other + zero 64M + read 2xL2": lambda: (rd(other, osink, 256 * MiB), zbuf[: 16 * MiB].zero_(), rd(rbuf, sink, 2 * l2)),
        "zero 256M (stock)": lambda: zbuf.zero_(),
    }
    samples = {name: [] for name in variants}
    bench = {p: [] for p in cleanflush.POLICIES}
    _measure.warm_up(fn, 1.5)
    for _ in range(rounds):
        for name, flush in variants.items():
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            for s, e in pairs:
                flush()
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            samples[name].extend(s.elapsed_time(e) * 1e3 for s, e in pairs)
        for p in cleanflush.POLICIES:
            with cleanflush.policy(p):
                bench[p].append(triton.testing.do_bench(fn, return_mode="mean") * 1e3)
    print(torch.cuda.get_device_name(), f"L2={l2 / MiB:.0f} MiB", torch.__version__, triton.__version__)
    for name, xs in samples.items():
        q = statistics.quantiles(xs, n=4)
        print(f"evloop  {name:42s} mean {statistics.fmean(xs):6.2f}  median {statistics.median(xs):6.2f}  IQR {q[0]:6.2f}-{q[2]:6.2f}")
    for p in cleanflush.POLICIES:  # the shape of one do_bench call's samples
        with cleanflush.policy(p):
            xs = sorted(x * 1e3 for x in triton.testing.do_bench(fn, return_mode="all"))
        pct = {q: xs[min(len(xs) - 1, int(q / 100 * len(xs)))] for q in (10, 50, 90, 99)}
        print(f"do_bench samples policy {p:22s} n={len(xs):5d} " + " ".join(f"p{q}={v:.2f}" for q, v in pct.items())
              + f" max={xs[-1]:.2f} mean={statistics.fmean(xs):.2f}")
    for p, xs in bench.items():
        print(f"do_bench (mean) policy {p:24s} median {statistics.median(xs):6.2f}  rounds {min(xs):6.2f}-{max(xs):6.2f}")


if __name__ == "__main__":
    main()
