"""Remote parameters as torch tensors, errors, and threads: what a trainer
meets through the Python package against real workers."""

import threading
import time

import numpy as np
import pytest
import torch

import distopt


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16,
                                   torch.bfloat16, torch.int64])
def test_parameters_round_trip_in_every_dtype(workers, client, dtype):
    values = (torch.arange(24) - 7).reshape(2, 3, 4).to(dtype)
    parameter = client.create_parameter(workers[0], f"p_{dtype}", values)
    assert parameter.owner() == workers[0]
    assert parameter.dtype == dtype and parameter.shape == (2, 3, 4)
    assert torch.equal(parameter.to_here(), values)
    parameter.copy_(values * 2)
    assert torch.equal(parameter.to_tensor(), values * 2)


def test_numpy_arrays_and_non_contiguous_tensors(workers, client):
    array = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    parameter = client.create_parameter(workers[0], "from_numpy", array)
    assert np.array_equal(parameter.to_tensor().numpy(), array)
    transposed = torch.arange(12, dtype=torch.float32).reshape(4, 3).t()
    parameter.copy_(transposed)  # Made contiguous on the way.
    assert torch.equal(parameter.to_tensor(), transposed)


def test_wrong_dtype_shape_device_and_type_name_the_argument(workers,
                                                             client):
    parameter = client.create_parameter(workers[0], "w", torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"values: dtype float16; expected "
                       r"float32"):
        parameter.copy_(torch.zeros(2, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"values: shape \[3, 2\]; expected "
                       r"\[2, 3\]"):
        parameter.copy_(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="expected a CPU tensor"):
        parameter.copy_(torch.zeros(2, 3, device="meta"))
    with pytest.raises(TypeError, match="values: list; expected a "
                       "torch.Tensor"):
        parameter.copy_([[0.0] * 3] * 2)
    with pytest.raises(ValueError, match="values: dtype torch.int32; expected"):
        client.create_parameter(workers[0], "i32",
                                torch.zeros(2, dtype=torch.int32))
    assert torch.equal(parameter.to_tensor(), torch.zeros(2, 3))


def test_errors_carry_code_worker_and_message(workers, client):
    fc = distopt.nn.RemoteLinear(4, 2, workers[0], client=client)
    optimizer = distopt.optim.DistributedOptimizer("sgd",
                                                   fc.remote_parameters(),
                                                   lr=0.1)
    with pytest.raises(distopt.Error) as unknown:
        optimizer.step(123456789)
    assert unknown.value.code == "NOT_FOUND"
    assert "context_id: 123456789" in str(unknown.value)
    with pytest.raises(distopt.Error) as missing:
        client.find_parameter(workers[1], "no such parameter")
    assert missing.value.code == "NOT_FOUND"
    assert missing.value.worker == workers[1]
    with pytest.raises(ValueError, match="hyperparameter 'momentun'"):
        distopt.optim.DistributedOptimizer("sgd", fc.remote_parameters(),
                                           momentun=0.9)
    with pytest.raises(distopt.Error, match="lr") as nan:
        distopt.optim.DistributedOptimizer("sgd", fc.remote_parameters(),
                                           lr=float("nan"))
    assert nan.value.code == "INVALID_ARGUMENT"


def test_a_killed_worker_is_named_within_the_deadline(worker_factory):
    client = distopt.Client(rpc_timeout=5.0)
    a, b = worker_factory(), worker_factory()
    fc1 = distopt.nn.RemoteLinear(4, 8, a.address, client=client)
    fc2 = distopt.nn.RemoteLinear(8, 2, b.address, client=client)
    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, fc1.remote_parameters() + fc2.remote_parameters(),
        lr=0.1)
    with distopt.autograd.context(client) as context_id:
        fc2(torch.relu(fc1(torch.randn(3, 4)))).sum().backward()
        b.kill()
        started = time.monotonic()
        with pytest.raises(distopt.Error) as failed:
            optimizer.step(context_id)
        assert time.monotonic() - started < 5.0 + 2.0
    assert failed.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    assert b.address in failed.value.workers
    assert failed.value.applied == [a.address]


def test_a_retried_step_is_applied_once(workers, client):
    fc = distopt.nn.RemoteLinear(4, 2, workers[0])
    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, fc.remote_parameters(), lr=0.5)
    with distopt.autograd.context() as context_id:
        fc(torch.ones(1, 4)).sum().backward()
        optimizer.step(context_id)
        once = fc.weight_ref.to_tensor()
        optimizer.step(context_id)  # As a retry after a lost reply.
        assert torch.equal(fc.weight_ref.to_tensor(), once)


def test_threads_step_concurrently_without_the_gil(workers, client):
    """4 threads, each with its own contexts, step one optimizer: the final
    parameter is the sum of every update, and the calls overlapped."""
    parameter = client.create_parameter(workers[0], "shared",
                                        torch.zeros(1000))
    optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, [parameter], lr=1.0)
    threads, steps = 4, 25
    intervals = []
    lock = threading.Lock()

    def train(thread):
        for _ in range(steps):
            with distopt.autograd.context() as context_id:
                distopt.autograd.accumulate_gradients(
                    context_id, {parameter: torch.full((1000,), -1.0)})
                started = time.monotonic()
                optimizer.step(context_id)
                with lock:
                    intervals.append((started, time.monotonic()))

    runners = [threading.Thread(target=train, args=(t,))
               for t in range(threads)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    assert torch.equal(parameter.to_tensor(),
                       torch.full((1000,), float(threads * steps)))
    intervals.sort()
    overlapping = sum(1 for (s0, e0), (s1, _) in zip(intervals, intervals[1:])
                      if s1 < e0)
    assert overlapping > 0, "no two steps were in flight at once"


def test_get_gradients_and_inference_outside_a_context(workers, client):
    fc = distopt.nn.RemoteLinear(3, 2, workers[0])
    x = torch.randn(4, 3)
    with torch.no_grad():
        y = fc(x)  # A context just for the forward.
    expected = x @ fc.weight_ref.to_tensor().t() + fc.bias_ref.to_tensor()
    torch.testing.assert_close(y, expected)
    with pytest.raises(RuntimeError, match="outside a distopt.autograd"):
        fc(x.requires_grad_())
    with distopt.autograd.context() as context_id:
        fc(x).sum().backward()
        gradients = distopt.autograd.get_gradients(context_id)
    torch.testing.assert_close(gradients[fc.bias_ref], torch.full((2,), 4.0))


def test_optimizer_state_dict_round_trip(workers, client):
    """Adam's state saved after 3 steps and loaded back (with the values)
    makes the next 2 steps repeat exactly."""
    fc1 = distopt.nn.RemoteLinear(4, 8, workers[0])
    fc2 = distopt.nn.RemoteLinear(8, 2, workers[1])
    parameters = fc1.remote_parameters() + fc2.remote_parameters()
    optimizer = distopt.optim.DistributedOptimizer(torch.optim.Adam,
                                                   parameters, lr=0.05)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))

    def train(steps):
        for _ in range(steps):
            with distopt.autograd.context() as context_id:
                fc2(torch.relu(fc1(x))).pow(2).sum().backward()
                optimizer.step(context_id)

    train(3)
    saved_state = optimizer.state_dict()
    saved_values = [p.to_tensor() for p in parameters]
    train(2)
    after = [p.to_tensor() for p in parameters]
    for parameter, values in zip(parameters, saved_values):
        parameter.copy_(values)
    optimizer.param_groups[0]["lr"] = 0.5  # Restored by the load.
    optimizer.load_state_dict(saved_state)
    assert optimizer.param_groups[0]["lr"] == 0.05
    train(2)
    for parameter, expected in zip(parameters, after):
        assert torch.equal(parameter.to_tensor(), expected)


def test_a_state_dict_saved_after_a_scheduler_step_steps_with_its_lr(
        workers, client):
    """The usual loop saves after scheduler.step(): param_groups hold the
    next lr, the owners' state the one last sent. The loaded optimizer
    steps with param_groups' lr, as torch's does (it stepped with the
    state's, 0.05 here, before)."""
    p = client.create_parameter(workers[0], "w", torch.ones(3))
    optimizer = distopt.optim.DistributedOptimizer("sgd", [p], lr=0.1)
    scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=0.5,
                                                    total_iters=1)
    with distopt.autograd.context() as context_id:
        distopt.autograd.accumulate_gradients(context_id, {p: torch.ones(3)})
        optimizer.step(context_id)  # lr 0.05.
    scheduler.step()  # lr 0.1 from now on.
    saved = optimizer.state_dict()
    assert saved["param_groups"][0]["lr"] == 0.1
    resumed = distopt.optim.DistributedOptimizer("sgd", [p], lr=0.1)
    resumed.load_state_dict(saved)
    before = p.to_tensor()
    with distopt.autograd.context() as context_id:
        distopt.autograd.accumulate_gradients(context_id, {p: torch.ones(3)})
        resumed.step(context_id)
    torch.testing.assert_close(before - p.to_tensor(), torch.full((3,), 0.1))


def test_a_state_dict_refused_by_one_owner_says_who_loaded_theirs(
        workers, client):
    """Each owner loads its own state, all or nothing: when the second
    refuses (its parameter has another shape), the error says the first
    loaded its state, as a failed step says where it was applied."""
    a = client.create_parameter(workers[0], "a", torch.ones(4))
    b = client.create_parameter(workers[1], "b", torch.ones(5))
    other_b = client.create_parameter(workers[1], "b2", torch.ones(6))
    optimizer = distopt.optim.DistributedOptimizer("adam", [a, b], lr=0.1)
    with distopt.autograd.context() as context_id:
        distopt.autograd.accumulate_gradients(
            context_id, {a: torch.ones(4), b: torch.ones(5)})
        optimizer.step(context_id)
    target = distopt.optim.DistributedOptimizer("adam", [a, other_b], lr=0.1)
    with pytest.raises(distopt.Error) as refused:
        target.load_state_dict(optimizer.state_dict())
    assert refused.value.worker == workers[1]
    assert refused.value.applied == [workers[0]]
    assert "mixes two states" in refused.value.message


def test_a_killed_worker_resumes_from_the_checkpoint_the_trainer_saved(
        worker_factory, client, tmp_path):
    flags = [f"--checkpoint_dir={tmp_path / 'checkpoints'}"]
    worker = worker_factory(flags)
    fc = distopt.nn.RemoteLinear(4, 2, worker.address, client=client,
                                 name="fc")
    optimizer = distopt.optim.DistributedOptimizer("adam",
                                                   fc.remote_parameters(),
                                                   lr=0.01)
    with distopt.autograd.context() as context_id:
        loss = fc(torch.ones(3, 4)).sum()
        distopt.autograd.backward(context_id, [loss])
        optimizer.step(context_id)
    saved = client.save_checkpoint(worker.address)
    assert saved["reason"] == "on demand" and saved["whole"]
    assert saved["parameters"] == 2
    assert "optimizers.bin" in saved["sections"]
    weight = fc.weight_ref.to_here()
    with distopt.autograd.context() as context_id:  # Lost with the worker.
        distopt.autograd.backward(context_id, [fc(torch.ones(3, 4)).sum()])
        optimizer.step(context_id)
    worker.kill()

    again = worker_factory(flags)
    restored = client.find_parameter(again.address, "fc.weight")
    assert torch.equal(restored.to_here(), weight)
    listed = client.list_checkpoints(again.address)
    assert [c["folder"] for c in listed["checkpoints"]] == ["parameters"]
    assert listed["restore_fell_back"] == ""


def test_saving_without_a_checkpoint_dir_names_the_flag(workers, client):
    with pytest.raises(distopt.Error, match="--checkpoint_dir") as refused:
        client.save_checkpoint(workers[0])
    assert refused.value.code == "FAILED_PRECONDITION"


def test_a_daemon_started_alone_is_a_group_of_one(workers, client):
    group = client.group(workers[0])
    assert group["state"] == "SINGLE"
    assert (group["rank"], group["world_size"]) == (0, 1)
    assert group["lost_ranks"] == [] and group["error"] == ""
    with pytest.raises(TypeError, match="worker"):
        client.group(7)
