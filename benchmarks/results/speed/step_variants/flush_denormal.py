"""Scratch: a small-preset training step with and without ``torch.set_flush_denormal(True)``, alternated.

Trains ``STEPS`` steps first, counts subnormal floats among the parameters, gradients and AdamW's state, then times
8-step blocks with the flag off and on in alternating order, one thread.

Usage (repository root): ``python .../flush_denormal.py kang STEPS ROUNDS``.
"""

import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, "benchmarks")
from training_throughput import _load

import sctrilemma

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
adata = _load(sys.argv[1])
sctrilemma.SCTrilemma.setup_anndata(adata)
model = sctrilemma.SCTrilemma(adata, preset="small")
model.train(max_steps=int(sys.argv[2]), early_stopping=False, enable_progress_bar=False)
torch.set_num_threads(1)
module = model.module.train()
optimizer = model.trainer.optimizers[0]
loader = iter(model._make_data_loader(adata=adata, batch_size=64, shuffle=True))
batch = next(loader)


def step():
    _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
    optimizer.zero_grad()
    loss.loss.backward()
    optimizer.step()


# count subnormals in params and grads after one step
step()
tiny = torch.finfo(torch.float32).tiny
n_sub = sum(int(((p.abs() < tiny) & (p != 0)).sum()) for p in module.parameters())
n_sub_g = sum(int(((p.grad.abs() < tiny) & (p.grad != 0)).sum()) for p in module.parameters() if p.grad is not None)
n_sub_s = sum(
    int(((v.abs() < tiny) & (v != 0)).sum())
    for st in optimizer.state.values()
    for v in st.values()
    if torch.is_tensor(v) and v.is_floating_point()
)
print("subnormal params", n_sub, "grads", n_sub_g, "optimizer state", n_sub_s, flush=True)
times = {False: [], True: []}
for r in range(int(sys.argv[3])):
    for flag in [False, True] if r % 2 == 0 else [True, False]:
        torch.set_flush_denormal(flag)
        step()
        step()
        t = time.perf_counter()
        for _ in range(8):
            step()
        times[flag].append((time.perf_counter() - t) / 8)
torch.set_flush_denormal(False)
ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
print({k: [round(x, 4) for x in v] for k, v in times.items()})
print("flush/plain", round(statistics.mean(ratios), 3), "+-", round(statistics.stdev(ratios), 3))
