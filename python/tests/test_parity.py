"""Training with distopt's remote layers and DistributedOptimizer over two
real workers equals training the same model locally with torch.optim: the
same losses step by step and the same final parameters (within 1e-5
relative)."""

import copy

import pytest
import torch

import distopt

STEPS = 50


def assert_close(remote, local, what):
    torch.testing.assert_close(remote, local, rtol=1e-5, atol=1e-6,
                               msg=lambda m: f"{what}: {m}")


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 5))


def batches(seed, count=STEPS, batch=16, features=12, classes=5):
    """Learnable batches: the labels are a fixed linear teacher's argmax."""
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, classes, generator=generator)
    data = []
    for _ in range(count):
        x = torch.randn(batch, features, generator=generator)
        data.append((x, (x @ teacher).argmax(dim=1)))
    return data


def train_both(local, remote, remote_params, optimizer_class, data,
               **hyperparameters):
    """Trains `local` with torch and `remote` with distopt on the same
    batches; returns both loss curves."""
    local_optimizer = optimizer_class(local.parameters(), **hyperparameters)
    remote_optimizer = distopt.optim.DistributedOptimizer(
        optimizer_class, remote_params, **hyperparameters)
    local_losses, remote_losses = [], []
    for x, y in data:
        local_optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(local(x), y)
        loss.backward()
        local_optimizer.step()
        local_losses.append(loss.item())
        with distopt.autograd.context() as context_id:
            loss = torch.nn.functional.cross_entropy(remote(x), y)
            loss.backward()
            remote_optimizer.step(context_id)
        remote_losses.append(loss.item())
    return torch.tensor(local_losses), torch.tensor(remote_losses)


@pytest.mark.parametrize("optimizer_class,hyperparameters", [
    (torch.optim.Adam, dict(lr=1e-2)),
    (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
])
def test_remote_mlp_trains_as_local(workers, client, optimizer_class,
                                    hyperparameters):
    local = mlp(seed=1)
    fc1 = distopt.nn.RemoteLinear(12, 32, workers[0], init_from=local[0])
    fc2 = distopt.nn.RemoteLinear(32, 5, workers[1], init_from=local[2])
    remote = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
    local_losses, remote_losses = train_both(
        local, remote, fc1.remote_parameters() + fc2.remote_parameters(),
        optimizer_class, batches(seed=2), **hyperparameters)
    assert_close(remote_losses, local_losses, "losses")
    # It did learn.
    assert local_losses[-10:].mean() < 0.8 * local_losses[:10].mean()
    assert_close(fc1.weight_ref.to_tensor(), local[0].weight.detach(),
                 "fc1.weight")
    assert_close(fc2.bias_ref.to_tensor(), local[2].bias.detach(), "fc2.bias")


def test_local_and_remote_layers_mixed(workers, client):
    """A local layer between two remote ones: its .grad comes from torch's
    autograd as usual and a local optimizer steps it."""
    local = mlp(seed=3)
    local.insert(2, torch.nn.Linear(32, 32))
    hidden = copy.deepcopy(local[2])
    fc1 = distopt.nn.RemoteLinear(12, 32, workers[0], init_from=local[0])
    fc3 = distopt.nn.RemoteLinear(32, 5, workers[1], init_from=local[3])
    remote = torch.nn.Sequential(fc1, torch.nn.ReLU(), hidden, fc3)
    local_optimizer = torch.optim.Adam(local.parameters(), lr=1e-2)
    hidden_optimizer = torch.optim.Adam(hidden.parameters(), lr=1e-2)
    remote_optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.Adam, fc1.remote_parameters() + fc3.remote_parameters(),
        lr=1e-2)
    for x, y in batches(seed=4):
        local_optimizer.zero_grad()
        local_loss = torch.nn.functional.cross_entropy(local(x), y)
        local_loss.backward()
        local_optimizer.step()
        hidden_optimizer.zero_grad()
        with distopt.autograd.context() as context_id:
            loss = torch.nn.functional.cross_entropy(remote(x), y)
            distopt.autograd.backward(context_id, [loss])
            remote_optimizer.step(context_id)
        hidden_optimizer.step()
        assert_close(loss.detach(), local_loss.detach(), "loss")
    assert_close(hidden.weight.detach(), local[2].weight.detach(), "hidden")
    assert_close(fc3.weight_ref.to_tensor(), local[3].weight.detach(), "fc3")


def test_embedding_model(workers, client):
    torch.manual_seed(5)
    embedding = torch.nn.Embedding(20, 8)
    head = torch.nn.Linear(8, 3)
    remote_embedding = distopt.nn.RemoteEmbedding(20, 8, workers[0],
                                                  init_from=embedding)
    remote_head = distopt.nn.RemoteLinear(8, 3, workers[1], init_from=head)
    local_optimizer = torch.optim.SGD(
        list(embedding.parameters()) + list(head.parameters()), lr=0.1,
        momentum=0.9)
    remote_optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, remote_embedding.remote_parameters() +
        remote_head.remote_parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(6)
    for step in range(STEPS):
        indices = torch.randint(0, 20, (16,), generator=generator)
        y = torch.randint(0, 3, (16,), generator=generator)
        local_optimizer.zero_grad()
        local_loss = torch.nn.functional.cross_entropy(
            head(embedding(indices)), y)
        local_loss.backward()
        local_optimizer.step()
        with distopt.autograd.context() as context_id:
            # int32 indices too, as torch.nn.Embedding takes them.
            loss = torch.nn.functional.cross_entropy(
                remote_head(remote_embedding(
                    indices.int() if step % 2 else indices)), y)
            loss.backward()
            remote_optimizer.step(context_id)
        assert_close(loss.detach(), local_loss.detach(), "loss")
    assert_close(remote_embedding.weight_ref.to_tensor(),
                 embedding.weight.detach(), "embedding")


def test_lr_scheduler_drives_the_remote_learning_rate(workers, client):
    """StepLR halves the rate every 5 steps: the remote parameters follow
    the local ones that the same schedule drives."""
    local = mlp(seed=7)
    fc1 = distopt.nn.RemoteLinear(12, 32, workers[0], init_from=local[0])
    fc2 = distopt.nn.RemoteLinear(32, 5, workers[1], init_from=local[2])
    remote = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
    local_optimizer = torch.optim.SGD(local.parameters(), lr=0.2)
    remote_optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.SGD, fc1.remote_parameters() + fc2.remote_parameters(),
        lr=0.2)
    local_schedule = torch.optim.lr_scheduler.StepLR(local_optimizer, 5, 0.5)
    remote_schedule = torch.optim.lr_scheduler.StepLR(remote_optimizer, 5, 0.5)
    rates = []
    for x, y in batches(seed=8, count=20):
        local_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(local(x), y).backward()
        local_optimizer.step()
        local_schedule.step()
        with distopt.autograd.context() as context_id:
            torch.nn.functional.cross_entropy(remote(x), y).backward()
            remote_optimizer.step(context_id)
        remote_schedule.step()
        rates.append(remote_optimizer.param_groups[0]["lr"])
        assert_close(fc1.weight_ref.to_tensor(), local[0].weight.detach(),
                     "fc1.weight")
    assert rates[4] == pytest.approx(0.1) and rates[-1] == pytest.approx(0.0125)


def test_flags_given_as_numbers_act_as_torch_takes_them(workers, client):
    """torch.optim takes amsgrad=1 as True, and a param_groups flag set to
    0 as False: so do the workers, through the optimizer and a change."""
    local = mlp(seed=9)
    fc1 = distopt.nn.RemoteLinear(12, 32, workers[0], init_from=local[0])
    fc2 = distopt.nn.RemoteLinear(32, 5, workers[1], init_from=local[2])
    remote = torch.nn.Sequential(fc1, torch.nn.ReLU(), fc2)
    local_optimizer = torch.optim.Adam(local.parameters(), lr=0.05, amsgrad=1)
    remote_optimizer = distopt.optim.DistributedOptimizer(
        torch.optim.Adam, fc1.remote_parameters() + fc2.remote_parameters(),
        lr=0.05, amsgrad=1)
    for step, (x, y) in enumerate(batches(seed=10, count=8)):
        if step == 4:
            for optimizer in (local_optimizer, remote_optimizer):
                optimizer.param_groups[0]["amsgrad"] = 0
        local_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(local(x), y).backward()
        local_optimizer.step()
        with distopt.autograd.context() as context_id:
            torch.nn.functional.cross_entropy(remote(x), y).backward()
            remote_optimizer.step(context_id)
        assert_close(fc1.weight_ref.to_tensor(), local[0].weight.detach(),
                     "fc1.weight")
        assert_close(fc2.weight_ref.to_tensor(), local[2].weight.detach(),
                     "fc2.weight")
