"""The Kubernetes manifests, checked as far as this machine can without a
cluster: their structure (the service and the StatefulSet agree on names,
selectors, ports and probes; the ranks' StatefulSet takes the rank from the
pod's ordinal and the world size from its replicas), every argument is a
flag distopt_worker knows, and the ranks' arguments, expanded as Kubernetes
would for each pod (with the cluster's names mapped to loopback ports),
make real daemons form one group."""

import json
import os
import re
import subprocess
import tempfile
import time

import yaml

HERE = "deploy/kubernetes"
WORKER = os.environ["DISTOPT_WORKER"]
DISTOPTCTL = os.environ.get(
    "DISTOPTCTL", os.path.join(os.path.dirname(os.path.dirname(WORKER)),
                               "tools", "distoptctl", "distoptctl"))


def documents(name):
    with open(os.path.join(HERE, name)) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d}


def worker_flags():
    out = subprocess.run([WORKER, "--helpfull"], capture_output=True,
                         text=True).stdout
    return set(re.findall(r"^\s+--([a-z_0-9]+) ", out, re.M))


def args_of(statefulset):
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return container, container["args"]


def flag_values(args):
    values = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, arg
        name, value = arg[2:].split("=", 1)
        values[name] = value
    return values


def check_service_and_statefulset(docs):
    service, statefulset = docs["Service"], docs["StatefulSet"]
    spec = statefulset["spec"]
    assert service["spec"]["clusterIP"] == "None"  # headless
    assert spec["serviceName"] == service["metadata"]["name"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    container, args = args_of(statefulset)
    flags = flag_values(args)
    known = worker_flags()
    assert known, "distopt_worker --helpfull listed no flags"
    for name in flags:
        assert name in known, f"--{name} is not a distopt_worker flag"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == service_ports
    assert flags["listen"].rsplit(":", 1)[1] == str(ports["grpc"])
    assert flags["metrics_listen"].rsplit(":", 1)[1] == str(ports["metrics"])
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    assert annotations["prometheus.io/path"] == "/metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == ports["grpc"]
    assert flags["log_format"] in ("text", "json")
    return service, statefulset, container, flags


def test_workers_manifest():
    _, statefulset, _, flags = check_service_and_statefulset(
        documents("distopt-worker.yaml"))
    assert flags["listen"].startswith("0.0.0.0:")
    # The grace the daemon takes fits in the pod's.
    grace = int(flags["shutdown_grace"].rstrip("s"))
    assert grace + 5 < statefulset["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]


def expand(arg, env):
    """Kubernetes' $(VAR) expansion in args."""
    return re.sub(r"\$\(([A-Z_]+)\)", lambda m: env[m.group(1)], arg)


def test_ranks_manifest_forms_a_group():
    service, statefulset, container, flags = check_service_and_statefulset(
        documents("distopt-ranks.yaml"))
    spec = statefulset["spec"]
    world = spec["replicas"]
    assert flags["world_size"] == str(world)
    assert spec["podManagementPolicy"] == "Parallel"
    assert service["spec"]["publishNotReadyAddresses"] is True
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in container["env"]}
    assert flags["rank"] == "$(RANK)"
    assert env["RANK"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["POD_NAME"] == "metadata.name"
    name, svc = statefulset["metadata"]["name"], service["metadata"]["name"]
    assert flags["listen"] == f"$(POD_NAME).{svc}:50051"
    assert flags["rendezvous"] == f"{name}-0.{svc}:50051"
    # The secret file lies in the secret's volume.
    mount = container["volumeMounts"][0]
    assert flags["group_secret_file"].startswith(mount["mountPath"] + "/")
    (volume,) = spec["template"]["spec"]["volumes"]
    assert volume["name"] == mount["name"] and "secret" in volume

    # Each pod's arguments as Kubernetes expands them, the cluster's names
    # mapped to loopback: a pod's own name to 127.0.0.1 on a port the OS
    # picks (each rank writes it to a file), rank 0's in --rendezvous to
    # where rank 0 listens; the secret to a file here; /metrics to any port.
    with tempfile.TemporaryDirectory() as folder:
        secret = os.path.join(folder, "secret")
        with open(secret, "w") as f:
            f.write("a group secret of more than 16 bytes")
        addresses = []
        daemons = []
        try:
            for rank in range(world):
                pod_env = {"RANK": str(rank), "POD_NAME": f"{name}-{rank}"}
                port_file = os.path.join(folder, f"rank-{rank}")
                args = []
                for arg in args_of(statefulset)[1]:
                    arg = expand(arg, pod_env)
                    arg = arg.replace(f"{name}-{rank}.{svc}:50051",
                                      "127.0.0.1:0")
                    if rank > 0:
                        arg = arg.replace(f"{name}-0.{svc}:50051",
                                          addresses[0])
                    arg = arg.replace(flags["group_secret_file"], secret)
                    arg = arg.replace("0.0.0.0:9400", "127.0.0.1:0")
                    args.append(arg)
                daemons.append(subprocess.Popen(
                    [WORKER, *args, f"--port_file={port_file}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + 30
                while not (os.path.exists(port_file) and
                           open(port_file).read().strip()):
                    assert daemons[-1].poll() is None, (rank, args)
                    assert time.monotonic() < deadline, (rank, args)
                    time.sleep(0.02)
                addresses.append(open(port_file).read().strip())
            deadline = time.monotonic() + 60
            for rank in range(world):
                while True:
                    out = subprocess.run(
                        [DISTOPTCTL, "--json", "group", addresses[rank]],
                        capture_output=True, text=True)
                    state = None
                    if out.returncode == 0:
                        group = json.loads(out.stdout)
                        group = group.get("group", group)
                        state = group.get("state")
                    if state == "ready":
                        assert group["rank"] == rank
                        assert group["world_size"] == world
                        break
                    assert time.monotonic() < deadline, (rank, out.stdout,
                                                         out.stderr)
                    time.sleep(0.2)
        finally:
            for daemon in daemons:
                daemon.terminate()
            for daemon in daemons:
                assert daemon.wait(60) == 0
