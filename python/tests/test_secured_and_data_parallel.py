"""Connection options and the data-parallel handles from Python: TLS with a
client certificate and a bearer token against a secured worker; ZeRO's
join, add_param_group and state dicts, and post-local SGD, on two ranks
driven from two threads."""

import os
import subprocess
import threading

import pytest
import torch

import distopt


def make_certificates(folder):
    """A CA, a server certificate for 127.0.0.1 and a client's."""
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    script = f"""
set -e
cd {folder}
openssl req -x509 {key} -keyout ca.key -out ca.pem -days 2 \\
    -subj '/CN=distopt test CA' 2>/dev/null
for who in server client; do
  openssl req {key} -keyout $who.key -out $who.csr -subj "/CN=$who" \\
      2>/dev/null
done
echo 'subjectAltName=IP:127.0.0.1' > server.ext
echo 'extendedKeyUsage=clientAuth' > client.ext
for who in server client; do
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial \\
      -out $who.pem -days 2 -extfile $who.ext 2>/dev/null
done
echo 's3cret-token' > token
"""
    subprocess.run(["bash", "-c", script], check=True)
    return lambda name: os.path.join(folder, name)


def test_mutual_tls_and_bearer_token(worker_factory, tmp_path):
    path = make_certificates(str(tmp_path))
    worker = worker_factory([
        f"--tls_cert_file={path('server.pem')}",
        f"--tls_key_file={path('server.key')}",
        f"--tls_client_ca_file={path('ca.pem')}",
        f"--auth_token_file={path('token')}"])
    read = lambda name: open(path(name)).read()  # noqa: E731
    secured = distopt.Client(rpc_timeout=5.0, tls_root_certs=read("ca.pem"),
                             tls_client_cert=read("client.pem"),
                             tls_client_key=read("client.key"),
                             auth_token="s3cret-token")
    parameter = secured.create_parameter(worker.address, "w",
                                         torch.arange(4.0))
    assert torch.equal(parameter.to_tensor(), torch.arange(4.0))
    wrong_token = distopt.Client(rpc_timeout=5.0,
                                 tls_root_certs=read("ca.pem"),
                                 tls_client_cert=read("client.pem"),
                                 tls_client_key=read("client.key"),
                                 auth_token="guess")
    with pytest.raises(distopt.Error) as refused:
        wrong_token.find_parameter(worker.address, "w")
    assert refused.value.code == "UNAUTHENTICATED"
    plaintext = distopt.Client(rpc_timeout=2.0)
    with pytest.raises(distopt.Error) as failed:
        plaintext.find_parameter(worker.address, "w")
    assert failed.value.code == "UNAVAILABLE"
    assert failed.value.worker == worker.address


def on_both_ranks(call):
    """call(rank) on two threads at once, as a collective needs."""
    results, errors = [None, None], []

    def run(rank):
        try:
            results[rank] = call(rank)
        except Exception as error:  # Reported below, on the test's thread.
            errors.append(error)

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def test_zero_join_param_groups_and_state_dict(group_of_two):
    client = distopt.connect()
    ranks = [worker.address for worker in group_of_two]
    parameters = [{name: client.create_parameter(address, name,
                                                 torch.ones(8) * (i + 1))
                   for i, name in enumerate(["a", "b", "c"])}
                  for address in ranks]
    zeros = on_both_ranks(lambda r: distopt.parallel.ZeroRedundancyOptimizer(
        ranks[r], torch.optim.Adam, ["a", "b"], lr=0.1))
    on_both_ranks(lambda r: zeros[r].add_param_group(
        {"params": ["c"], "lr": 0.01}))
    assert len(zeros[0].get()["owners"]) == 3

    def step(rank, steps):
        for s in range(steps):
            with distopt.autograd.context() as context_id:
                distopt.autograd.accumulate_gradients(
                    context_id, {p: torch.full((8,), float(rank + s))
                                 for p in parameters[rank].values()})
                zeros[rank].step(context_id)

    on_both_ranks(lambda r: step(r, 2))
    # Rank 1's data runs out: it joins while rank 0 steps twice more, then
    # joins too.
    joined = on_both_ranks(
        lambda r: (step(r, 2), zeros[r].join())[1] if r == 0
        else zeros[r].join())
    assert joined == [0, 2]
    for name in ("a", "b", "c"):
        assert torch.equal(parameters[0][name].to_tensor(),
                           parameters[1][name].to_tensor())
    on_both_ranks(lambda r: zeros[r].consolidate_state_dict(to=0))
    state = zeros[0].state_dict()
    assert len(state) > 0
    on_both_ranks(lambda r: zeros[r].load_state_dict(state))


def test_post_local_sgd_averages_every_period(group_of_two):
    client = distopt.connect()
    ranks = [worker.address for worker in group_of_two]
    parameters = [client.create_parameter(address, "w", torch.zeros(4))
                  for address in ranks]
    optimizers = on_both_ranks(
        lambda r: distopt.parallel.PostLocalSGDOptimizer(
            ranks[r], torch.optim.SGD, ["w"], period=2, lr=1.0,
            bucket_bytes=4096,
            # Local steps stay local (by default the ranks on one host
            # all-reduce their gradients, as torch's post-local SGD hook).
            no_post_local_gradient_allreduce=True))

    def step(rank):
        with distopt.autograd.context() as context_id:
            distopt.autograd.accumulate_gradients(
                context_id, {parameters[rank]: torch.full((4,), rank + 1.0)})
            return optimizers[rank].step(context_id)

    assert int(optimizers[0].get()["bucket_bytes"]) == 4096
    # As torch's PeriodicModelAverager: steps 0, 2, 4, ... average.
    assert on_both_ranks(step) == [2, 2]  # -1 and -2, averaged: -1.5.
    assert on_both_ranks(step) == [0, 0]  # Local: -2.5 and -3.5.
    assert not torch.equal(parameters[0].to_tensor(),
                           parameters[1].to_tensor())
    assert on_both_ranks(step) == [2, 2]  # -3.5 and -5.5, averaged.
    for parameter in parameters:
        torch.testing.assert_close(parameter.to_tensor(),
                                   torch.full((4,), -4.5))
