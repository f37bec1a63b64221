"""The Python package against the C++ client and PyTorch RPC, in one run.

    bazel run -c opt //python:step_bench

For 1, 2 and 4 workers: DistributedOptimizer.step p50 from Python (SGD, 10
parameters of 1K floats spread over the workers, gradients pushed outside
the timing) against the C++ client's p50 on the same workers
(cpp_step_probe; goal: at most 25 us above it) and PyTorch RPC's
DistributedOptimizer (tools/bench/torch_rpc_step.py; goal: >= 3x faster);
and a RemoteLinear(1024, 1024) forward + backward of a [256, 1024] batch
through torch autograd against the C++ client's (goal: within 10 %).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import torch  # noqa: E402

import distopt  # noqa: E402

ITERATIONS = 2000


def start_workers(binary, count, folder):
    workers = []
    for i in range(count):
        port_file = os.path.join(folder, f"port{count}_{i}")
        process = subprocess.Popen([binary, "--listen=127.0.0.1:0",
                                    f"--port_file={port_file}"],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        while not (os.path.exists(port_file) and open(port_file).read()):
            if process.poll() is not None:
                sys.exit(f"{binary} did not start")
            time.sleep(0.02)
        workers.append((process, open(port_file).read().strip()))
    return workers


def p50(values):
    return statistics.median(values)


def python_step_p50(client, addresses, iterations):
    parameters = [client.create_parameter(addresses[i % len(addresses)],
                                          f"py_bench.p{i}",
                                          torch.zeros(1024))
                  for i in range(10)]
    optimizer = distopt.optim.DistributedOptimizer(torch.optim.SGD,
                                                   parameters, lr=1e-3)
    gradients = {p: torch.ones(1024) for p in parameters}
    micros = []
    for _ in range(iterations):
        with distopt.autograd.context() as context_id:
            distopt.autograd.accumulate_gradients(context_id, gradients)
            started = time.perf_counter()
            optimizer.step(context_id)
            micros.append(1e6 * (time.perf_counter() - started))
    del optimizer
    for p in parameters:
        p.delete()
    return p50(micros)


def python_linear_p50(address, iterations):
    layer = distopt.nn.RemoteLinear(1024, 1024, address, name="py_bench.fc")
    x = torch.full((256, 1024), 0.5)
    ones = torch.ones(256, 1024)
    micros = []
    for _ in range(iterations):
        with distopt.autograd.context():
            started = time.perf_counter()
            layer(x).backward(ones)
            micros.append(1e6 * (time.perf_counter() - started))
    for p in layer.remote_parameters():
        p.delete()
    return p50(micros)


def cpp_figures(probe, addresses, iterations):
    output = subprocess.run([probe, str(iterations), *addresses],
                            capture_output=True, text=True,
                            check=True).stdout
    return {line.split()[0]: float(line.split()[1])
            for line in output.splitlines()}


def torch_rpc_p50(count):
    script = "tools/bench/torch_rpc_step.py"
    result = subprocess.run(["/usr/bin/python3", script, str(count), "300",
                             "2"], capture_output=True, text=True)
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields[1:3] == ["small", "sgd"]:
            return float(fields[3])
    return None


def main():
    binary = os.environ.get("DISTOPT_WORKER", "bazel-bin/server/distopt_worker")
    probe = os.environ.get("DISTOPT_CPP_PROBE",
                           "bazel-bin/python/cpp_step_probe")
    with_torch = "--no_torch" not in sys.argv
    client = distopt.connect()
    print(f"{'case':38} {'python':>9} {'c++':>9} {'diff':>8} {'torch rpc':>10}"
          f" {'torch/python':>12}")
    summary = []
    with tempfile.TemporaryDirectory() as folder:
        for count in (1, 2, 4):
            workers = start_workers(binary, count, folder)
            addresses = [address for _, address in workers]
            try:
                cpp = cpp_figures(probe, addresses, ITERATIONS)
                python = python_step_p50(client, addresses, ITERATIONS)
                peer = torch_rpc_p50(count) if with_torch else None
                diff = python - cpp["step_p50_us"]
                ratio = peer / python if peer else float("nan")
                print(f"{f'step, {count} worker(s), 10 x 1K sgd':38} "
                      f"{python:8.1f}u {cpp['step_p50_us']:8.1f}u "
                      f"{diff:7.1f}u {peer or float('nan'):9.1f}u "
                      f"{ratio:11.2f}x")
                summary.append(
                    f"step p50, {count} worker(s): Python {python:.1f} us, "
                    f"C++ {cpp['step_p50_us']:.1f} us: {diff:+.1f} us "
                    f"(goal <= 25); PyTorch RPC {peer or float('nan'):.1f} us"
                    f": {ratio:.2f}x (goal >= 3)")
                if count == 1:
                    linear = python_linear_p50(addresses[0],
                                               ITERATIONS // 10 + 5)
                    ratio = linear / cpp["linear_p50_us"]
                    print(f"{'RemoteLinear fwd+bwd [256, 1024]':38} "
                          f"{linear:8.1f}u {cpp['linear_p50_us']:8.1f}u "
                          f"{linear - cpp['linear_p50_us']:7.1f}u")
                    summary.append(
                        f"RemoteLinear(1024, 1024) forward + backward of "
                        f"[256, 1024]: Python {linear:.0f} us, C++ "
                        f"{cpp['linear_p50_us']:.0f} us: {ratio:.3f}x "
                        "(goal <= 1.10)")
            finally:
                for process, _ in workers:
                    process.terminate()
                    process.wait()
    print()
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
