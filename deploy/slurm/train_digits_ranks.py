"""An example trainer for the ranks of deploy/slurm/distopt_ranks.sbatch:
one trainer per rank (srun starts them, one per task), each driving its own
rank's daemon. It trains the digits MLP on its share of every batch with
ZeRO, then goes on with post-local SGD (local steps, parameters averaged
every `--period` steps), and prints one line per phase that a script can
check:

  zero rank=R steps=N loss=FIRST->LAST checksum=HEX
  local_sgd rank=R steps=N averaged_at=S1,S2,... checksum=HEX

The checksum is of the parameters' bytes: after ZeRO (and after an
averaging step) it is the same on every rank.

  python3 train_digits_ranks.py [--addresses=DIR] [--steps=20] [--period=4]

DIR (default $DISTOPT_ADDRESS_DIR) holds rank-R.addr files (the sbatch
script writes them); the rank and the world size come from Slurm
(SLURM_PROCID, SLURM_NTASKS).
"""

import argparse
import hashlib
import os
import sys
import time

import torch

import distopt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "examples"))
import digits  # noqa: E402


def checksum(parameters):
    digest = hashlib.sha256()
    for p in parameters:
        digest.update(p.to_tensor().numpy().tobytes())
    return digest.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addresses",
                        default=os.environ.get("DISTOPT_ADDRESS_DIR"),
                        help="the ranks' rank-R.addr files (default: "
                             "$DISTOPT_ADDRESS_DIR, as the sbatch script "
                             "sets it)")
    parser.add_argument("--data", default=os.path.join(
        HERE, "..", "..", "data", "digits", "digits.csv.gz"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--period", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    rank = int(os.environ["SLURM_PROCID"])
    world = int(os.environ["SLURM_NTASKS"])
    path = os.path.join(args.addresses, f"rank-{rank}.addr")
    deadline = time.monotonic() + 300
    while not (os.path.exists(path) and open(path).read().strip()):
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: no address in {path}")
        time.sleep(0.2)
    address = open(path).read().strip()

    client = distopt.connect()
    torch.manual_seed(0)  # The same initial model on every rank.
    fc1 = distopt.nn.RemoteLinear(64, 32, address, name="fc1")
    fc2 = distopt.nn.RemoteLinear(32, 10, address, name="fc2")
    model = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    parameters = fc1.remote_parameters() + fc2.remote_parameters()
    features, labels = digits.load_digits(args.data)
    share = args.batch
    per_step = share * world

    def batch(step):
        start = (step * per_step + rank * share) % (len(labels) - share)
        return features[start:start + share], labels[start:start + share]

    zero = distopt.parallel.ZeroRedundancyOptimizer(
        address, torch.optim.Adam, names, lr=1e-2, client=client)
    losses = []
    for step in range(args.steps):
        x, y = batch(step)
        with distopt.autograd.context() as context_id:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            zero.step(context_id)
        losses.append(loss.item())
    print(f"zero rank={rank} steps={args.steps} "
          f"loss={losses[0]:.4f}->{losses[-1]:.4f} "
          f"checksum={checksum(parameters)}", flush=True)

    local = distopt.parallel.PostLocalSGDOptimizer(
        address, "sgd", names, lr=0.05, period=args.period, client=client)
    averaged_at = []
    # Steps 0, period, 2 period, ... average: end on one, so that every
    # rank holds the same model at the end.
    local_steps = (args.steps // args.period) * args.period + 1
    for step in range(local_steps):
        x, y = batch(args.steps + step)
        with distopt.autograd.context() as context_id:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if local.step(context_id) > 0:
                averaged_at.append(step)
    print(f"local_sgd rank={rank} steps={local_steps} "
          f"averaged_at={','.join(map(str, averaged_at))} "
          f"checksum={checksum(parameters)}", flush=True)


if __name__ == "__main__":
    main()
