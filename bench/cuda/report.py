"""Joins bench_cuda_kernels' KROW lines with peer_torch.py's PEER lines (same run) and prints the table:
kernel, shape, measured us (per call in a CUDA graph), floor us, bound, measured/floor, achieved rate, one
launch between events, peer us (graph-timed at m <= 256, like ours; event-timed above). Floor = max(bytes / copy ceiling,
FLOPs / FP8 GEMM ceiling, or the bf16 one for bf16 kernels), the ceilings measured in the same run (CEIL lines).
    python3 bench/cuda/report.py bench.log peer.log
"""
import sys


def main(paths):
    ceil, krows, peers = {}, [], {}
    for path in paths:
        for line in open(path):
            f = line.strip().split("|")
            if f[0] == "CEIL":
                ceil[f[1]] = float(f[2])
            elif f[0] == "KROW":
                krows.append((f[1], f[2], float(f[3]), float(f[4]), float(f[5]), float(f[6])))
            elif f[0] == "PEER":
                peers.setdefault(f[2], []).append((f[1], float(f[3])))
    bw = ceil.get("copy_tb_s", 0) * 1e12
    fp8 = ceil.get("fp8_tflops", 0) * 1e12
    print(f"ceilings: copy {ceil.get('copy_tb_s', 0):.2f} TB/s (torch {ceil.get('torch_copy_tb_s', 0):.2f}), "
          f"fp8 {ceil.get('fp8_tflops', 0):.0f} TFLOP/s, bf16 {ceil.get('bf16_tflops', 0):.0f} TFLOP/s, "
          f"fp32 {ceil.get('fp32_tflops', 0):.1f} TFLOP/s (8192^3)")
    print("| kernel | shape | measured us | floor us | bound | measured/floor | achieved | 1 launch us | peer us (same run) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kernel, shape, us, nbytes, flops, event_us in krows:
        t_mem = nbytes / bw * 1e6 if bw else 0
        rate_ceil = ceil.get("bf16_tflops", 0) * 1e12 if "bf16" in kernel else fp8  # bf16 kernels: bf16 peak
        if "fp32" in kernel:  # CUDA-core fp32 kernels: torch's fp32 matmul rate of the same run
            rate_ceil = ceil.get("fp32_tflops", 0) * 1e12
        t_fl = flops / rate_ceil * 1e6 if rate_ceil else 0
        floor, bound = (t_mem, "mem") if t_mem >= t_fl else (t_fl, "flop")
        rate = f"{flops / us * 1e-6:.0f} TF" if bound == "flop" else f"{nbytes / us * 1e-6:.2f} TB/s"
        peer = "; ".join(f"{name} {p:.1f}" for name, p in peers.get(shape, []))
        print(f"| {kernel} | {shape} | {us:.1f} | {floor:.1f} | {bound} | {us / floor if floor else 0:.2f} | {rate} | {event_us:.1f} | {peer} |")


if __name__ == "__main__":
    main(sys.argv[1:])
