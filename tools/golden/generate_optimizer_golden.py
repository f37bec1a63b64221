#!/usr/bin/env python3
"""Writes golden vectors for distopt's functional optimizers from torch.optim.

Run with Debian's PyTorch (python3-torch):

    /usr/bin/python3 tools/golden/generate_optimizer_golden.py \
        > server/optim/testdata/optimizer_golden.txt

Each case runs one torch.optim optimizer for several steps on three
parameters (shapes [3, 4], [] and [7]); some steps leave a parameter without
a gradient. After every step it records every parameter, every state tensor
and every step count. float16 and bfloat16 cases run in float32 and round
the parameters to the dtype after each step, which is what distopt does
(fp32 arithmetic and fp32 state, half-precision storage).

Format, one record a line; floats are exact hex (float.hex):
    case NAME / kind KIND / dtype DTYPE / hyper NAME number|bool|pair V...
    param I SHAPE V...      initial values; SHAPE is comma-separated, - for 0-d
    step K                  then one of these per parameter:
    grad I V... | grad I none
    expect_param I V... / expect_step I N / expect_state I NAME V...
    end
"""

import sys

import torch

SHAPES = [(3, 4), (), (7,)]
STEPS = 6
# (step, parameter) pairs with no gradient.
MISSING = {(1, 2), (3, 1), (5, 2)}

KINDS = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "adagrad": torch.optim.Adagrad,
    "adadelta": torch.optim.Adadelta,
    "adamax": torch.optim.Adamax,
    "rmsprop": torch.optim.RMSprop,
    "rprop": torch.optim.Rprop,
}

# (name, kind, dtype, hyperparameters). SGD's lr is always given: it has no
# default in older PyTorch.
CASES = [
    ("sgd_plain", "sgd", "float32", {"lr": 0.1}),
    ("sgd_momentum", "sgd", "float32", {"lr": 0.1, "momentum": 0.9}),
    ("sgd_dampening", "sgd", "float32",
     {"lr": 0.05, "momentum": 0.9, "dampening": 0.5}),
    ("sgd_nesterov", "sgd", "float32",
     {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
    ("sgd_weight_decay", "sgd", "float32", {"lr": 0.1, "weight_decay": 0.1}),
    ("sgd_maximize", "sgd", "float32", {"lr": 0.1, "maximize": True}),
    ("sgd_all", "sgd", "float32",
     {"lr": 0.03, "momentum": 0.7, "weight_decay": 0.05, "maximize": True}),
    ("adam_defaults", "adam", "float32", {}),
    ("adam_amsgrad", "adam", "float32", {"lr": 0.01, "amsgrad": True}),
    ("adam_weight_decay", "adam", "float32", {"lr": 0.01, "weight_decay": 0.1}),
    ("adam_maximize", "adam", "float32", {"lr": 0.01, "maximize": True}),
    ("adam_betas_eps", "adam", "float32",
     {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("adamw_defaults", "adamw", "float32", {}),
    ("adamw_amsgrad", "adamw", "float32", {"lr": 0.01, "amsgrad": True}),
    ("adamw_weight_decay_maximize", "adamw", "float32",
     {"lr": 0.01, "weight_decay": 0.1, "maximize": True}),
    ("adamw_no_decay", "adamw", "float32", {"lr": 0.01, "weight_decay": 0.0}),
    ("adagrad_defaults", "adagrad", "float32", {}),
    ("adagrad_lr_decay", "adagrad", "float32", {"lr": 0.1, "lr_decay": 0.1}),
    ("adagrad_initial_accumulator", "adagrad", "float32",
     {"lr": 0.1, "initial_accumulator_value": 0.5}),
    ("adagrad_weight_decay", "adagrad", "float32",
     {"lr": 0.1, "weight_decay": 0.1}),
    ("adagrad_maximize_eps", "adagrad", "float32",
     {"lr": 0.05, "maximize": True, "eps": 1e-6}),
    ("adadelta_defaults", "adadelta", "float32", {}),
    ("adadelta_rho", "adadelta", "float32", {"rho": 0.5}),
    ("adadelta_weight_decay", "adadelta", "float32", {"weight_decay": 0.1}),
    ("adadelta_maximize", "adadelta", "float32", {"maximize": True}),
    ("adadelta_lr_eps", "adadelta", "float32", {"lr": 0.5, "eps": 1e-4}),
    ("adamax_defaults", "adamax", "float32", {}),
    ("adamax_weight_decay", "adamax", "float32",
     {"lr": 0.01, "weight_decay": 0.1}),
    ("adamax_maximize", "adamax", "float32", {"lr": 0.01, "maximize": True}),
    ("adamax_betas", "adamax", "float32",
     {"lr": 0.01, "betas": (0.7, 0.9), "eps": 1e-5}),
    ("rmsprop_defaults", "rmsprop", "float32", {}),
    ("rmsprop_centered", "rmsprop", "float32", {"centered": True}),
    ("rmsprop_momentum", "rmsprop", "float32", {"momentum": 0.9}),
    ("rmsprop_centered_momentum", "rmsprop", "float32",
     {"centered": True, "momentum": 0.5, "lr": 0.005}),
    ("rmsprop_weight_decay", "rmsprop", "float32", {"weight_decay": 0.1}),
    ("rmsprop_maximize", "rmsprop", "float32", {"maximize": True}),
    ("rmsprop_alpha", "rmsprop", "float32", {"alpha": 0.9, "eps": 1e-6}),
    ("rprop_defaults", "rprop", "float32", {}),
    ("rprop_etas", "rprop", "float32", {"etas": (0.3, 1.5)}),
    ("rprop_step_sizes", "rprop", "float32",
     {"lr": 0.1, "step_sizes": (1e-3, 0.2)}),
    ("rprop_maximize", "rprop", "float32", {"maximize": True}),
    ("sgd_momentum_fp16", "sgd", "float16", {"lr": 0.1, "momentum": 0.9}),
    ("sgd_weight_decay_bf16", "sgd", "bfloat16",
     {"lr": 0.1, "weight_decay": 0.1}),
    ("adam_fp16", "adam", "float16", {"lr": 0.01}),
    ("adam_amsgrad_bf16", "adam", "bfloat16", {"lr": 0.01, "amsgrad": True}),
    ("adamw_bf16", "adamw", "bfloat16", {"lr": 0.01}),
    ("adagrad_fp16", "adagrad", "float16", {"lr": 0.1}),
    ("adadelta_bf16", "adadelta", "bfloat16", {}),
    ("adamax_fp16", "adamax", "float16", {"lr": 0.01}),
    ("rmsprop_centered_bf16", "rmsprop", "bfloat16", {"centered": True}),
    ("rprop_fp16", "rprop", "float16", {}),
]

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def hexes(tensor):
    return " ".join(float(x).hex() for x in tensor.reshape(-1).tolist())


def rounded(tensor, dtype):
    """`tensor` rounded to `dtype` and back to float32."""
    return tensor.to(DTYPES[dtype]).to(torch.float32)


def hyper_line(name, value):
    if isinstance(value, bool):
        return f"hyper {name} bool {int(value)}"
    if isinstance(value, tuple):
        return f"hyper {name} pair {float(value[0]).hex()} {float(value[1]).hex()}"
    return f"hyper {name} number {float(value).hex()}"


def run_case(out, index, name, kind, dtype, hyper):
    generator = torch.Generator().manual_seed(1000 + index)
    params = []
    for shape in SHAPES:
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        params.append(torch.nn.Parameter(rounded(values, dtype)))
    optimizer = KINDS[kind](params, **hyper)
    out.append(f"case {name}")
    out.append(f"kind {kind}")
    out.append(f"dtype {dtype}")
    for key, value in sorted(hyper.items()):
        out.append(hyper_line(key, value))
    for i, (shape, param) in enumerate(zip(SHAPES, params)):
        shape_text = ",".join(str(d) for d in shape) or "-"
        out.append(f"param {i} {shape_text} {hexes(param.detach())}")
    for step in range(1, STEPS + 1):
        out.append(f"step {step}")
        for i, param in enumerate(params):
            if (step, i) in MISSING:
                param.grad = None
                out.append(f"grad {i} none")
                continue
            grad = torch.randn(param.shape, generator=generator) * 0.5
            param.grad = rounded(grad, dtype)
            out.append(f"grad {i} {hexes(param.grad)}")
        optimizer.step()
        with torch.no_grad():
            for param in params:
                param.copy_(rounded(param, dtype))
        for i, param in enumerate(params):
            out.append(f"expect_param {i} {hexes(param.detach())}")
            state = optimizer.state.get(param, {})
            if "step" in state:
                out.append(f"expect_step {i} {int(float(state['step']))}")
            for key in sorted(state):
                # SGD without momentum keeps momentum_buffer = None.
                if key == "step" or state[key] is None:
                    continue
                out.append(f"expect_state {i} {key} {hexes(state[key])}")
    out.append("end")


def main():
    torch.set_num_threads(1)
    out = [f"# Generated by tools/golden/generate_optimizer_golden.py with "
           f"torch {torch.__version__}; do not edit."]
    for index, (name, kind, dtype, hyper) in enumerate(CASES):
        run_case(out, index, name, kind, dtype, hyper)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
