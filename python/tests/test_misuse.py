"""What a PyTorch user may get wrong, or do differently from the examples:
each is refused with an exception that says what was expected, or works as
torch would. (Found by a hostile review of the package.)"""

import array
import multiprocessing
import threading
import time

import numpy as np
import pytest
import torch

import distopt
from distopt import _distopt


def test_a_forward_is_backpropagated_once(workers, client):
    fc = distopt.nn.RemoteLinear(4, 2, workers[0])
    x = torch.randn(3, 4, requires_grad=True)
    with distopt.autograd.context():
        y = fc(x).sum()
        y.backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="backpropagated already"):
            y.backward()
    with distopt.autograd.context():
        y = fc(x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()  # torch's own refusal, without retain_graph.


def test_state_dict_of_other_owners_is_refused(workers, client):
    fa = distopt.nn.RemoteLinear(2, 2, workers[0])
    fb = distopt.nn.RemoteLinear(2, 2, workers[1])
    ab = distopt.optim.DistributedOptimizer(
        "adam", fa.remote_parameters() + fb.remote_parameters())
    ba = distopt.optim.DistributedOptimizer(
        "adam", fb.remote_parameters() + fa.remote_parameters())
    with pytest.raises(ValueError, match=r"state_dict\['owners'\]"):
        ba.load_state_dict(ab.state_dict())


def test_zero_dimensional_and_float_like_values(workers, client):
    scalar = client.create_parameter(workers[0], "s",
                                     np.array(1.5, np.float32))
    assert scalar.shape == torch.Size([])
    scalar.copy_(np.array(2.5, np.float32))
    assert scalar.to_tensor().item() == 2.5
    # numpy scalars and one-element tensors are floats, as torch takes them.
    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, [scalar], lr=np.float32(0.5))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: torch.tensor(0.5) ** epoch)
    for _ in range(2):  # At lr 0.5, then 0.25.
        with distopt.autograd.context() as context_id:
            distopt.autograd.accumulate_gradients(
                context_id, {scalar: torch.tensor(1.0)})
            optimizer.step(context_id)
        schedule.step()
    assert scalar.to_tensor().item() == pytest.approx(2.5 - 0.5 - 0.25)


def test_a_buffer_stays_pinned_while_a_call_reads_it(workers, client):
    values = array.array("f", bytes(128 << 20))
    called = threading.Thread(
        target=client._impl.create_parameter_from,
        args=(workers[0], "pinned", values, "float32"))
    called.start()
    time.sleep(0.05)
    refused = False
    while called.is_alive():
        try:
            del values[:]  # Would free the memory the call reads.
        except BufferError:
            refused = True
        time.sleep(0.01)
    called.join()
    assert refused, "the call ended before the resize was tried"


def test_none_or_a_wrong_client_is_a_type_error():
    with pytest.raises(TypeError, match="client: NoneType"):
        _distopt.RemoteZero(None, "127.0.0.1:1")
    with pytest.raises(TypeError, match="client: NoneType"):
        _distopt.RemoteLocalSgd(None, "127.0.0.1:1")
    with pytest.raises(TypeError, match="client: str"):
        _distopt.DistributedOptimizer("x", "sgd", [("127.0.0.1:1", 1)], {})


def test_layers_made_in_a_loop_get_their_own_names(workers, client):
    layers = [distopt.nn.RemoteLinear(4, 2, workers[0]) for _ in range(3)]
    names = {layer.weight_ref.info()["name"] for layer in layers}
    assert len(names) == 3


def test_module_state_dict_holds_the_remote_weights(workers, client):
    torch.manual_seed(0)
    local = torch.nn.Linear(3, 2)
    model = torch.nn.Sequential(
        distopt.nn.RemoteLinear(3, 2, workers[0], init_from=local),
        torch.nn.ReLU())
    state = model.state_dict()
    assert torch.equal(state["0.weight"], local.weight.detach())
    state["0.bias"] = torch.tensor([7.0, 8.0])
    model.load_state_dict(state)
    assert torch.equal(model[0].bias_ref.to_tensor(), torch.tensor([7.0, 8.0]))


def test_linear_takes_any_leading_dimensions(workers, client):
    torch.manual_seed(1)
    local = torch.nn.Linear(4, 3)
    remote = distopt.nn.RemoteLinear(4, 3, workers[0], init_from=local)
    for shape in [(4,), (2, 5, 4)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(remote(x), local(x))
    with pytest.raises(ValueError, match=r"x: shape \[2, 5\]; expected"):
        with torch.no_grad():
            remote(torch.randn(2, 5))
    with pytest.raises(ValueError, match="expected torch.float32"):
        distopt.nn.RemoteLinear(4, 3, workers[0], init_from=local.half())
    # Conversions that would change the remote weights are refused; the
    # no-ops pass.
    model = torch.nn.Sequential(remote, torch.nn.ReLU())
    with pytest.raises(NotImplementedError, match="cannot move them"):
        model.half()
    model.float()
    model.to("cpu")


def test_connection_and_creation_arguments_are_checked(workers, client):
    with pytest.raises(ValueError, match="auth_token: given without"):
        distopt.Client(auth_token="secret")
    assert client.create_parameter(workers[0], "z", shape=[2],
                                   init="zeros").to_tensor().sum() == 0
    with pytest.raises(TypeError, match="shape: 5; expected a sequence"):
        client.create_parameter(workers[0], "bad", shape=5)
    with pytest.raises(TypeError, match="worker: NoneType; expected a str"):
        client.create_parameter(None, "bad", shape=[1])
    with pytest.raises(ValueError, match="a seed from 0 to 2"):
        client.create_parameter(workers[0], "bad", shape=[1],
                                init=("normal", 0.0, 1.0, -1))


def _call_after_fork(address, results):
    try:
        distopt.default_client().find_parameter(address, "anything")
        results.put("no error")
    except RuntimeError as error:
        results.put(str(error))


def test_a_forked_child_is_refused_not_hung(workers, client):
    client.create_parameter(workers[0], "before fork", torch.zeros(1))
    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    child = fork.Process(target=_call_after_fork,
                         args=(workers[0], results))
    child.start()
    assert "does not survive fork" in results.get(timeout=20)
    child.join(timeout=20)


def test_errors_name_ipv6_workers_too():
    """Workers at IPv6 addresses are named as "[address]:port" (they were
    not parsed: worker None, workers and applied empty)."""
    error = distopt.Error(
        14, "UNAVAILABLE",
        "worker [::1]:4100: Step: connection refused; "
        "worker 10.0.0.2:4101: Step: no reply. Applied on: [::1]:4102, "
        "10.0.0.3:4103.")
    assert error.worker == "[::1]:4100"
    assert error.workers == ["[::1]:4100", "10.0.0.2:4101"]
    assert error.applied == ["[::1]:4102", "10.0.0.3:4103"]
