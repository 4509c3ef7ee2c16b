"""Scratch: torch.profiler over ten small-preset training steps on one Kang 2018 batch (64 cells), one thread.

Run from the repository root: ``python benchmarks/results/speed/training_step_ops_kang.py``.
"""

import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
from training_throughput import _load

import sctrilemma

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
adata = _load("kang")
sctrilemma.SCTrilemma.setup_anndata(adata)
model = sctrilemma.SCTrilemma(adata, preset="small")
model.train(max_steps=2, early_stopping=False, enable_progress_bar=False)
torch.set_num_threads(1)
module = model.module.train()
optimizer = model.trainer.optimizers[0]
batch = next(iter(model._make_data_loader(adata=adata, batch_size=64, shuffle=True)))


def step() -> None:
    _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
    optimizer.zero_grad()
    loss.loss.backward()
    optimizer.step()


for _ in range(5):
    step()
start = time.perf_counter()
for _ in range(20):
    step()
print("s/step", (time.perf_counter() - start) / 20)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(10):
        step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=35))
