from __future__ import annotations

import math

import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.model._presets import recipe_trainer_kwargs
from sctrilemma.train import warmup_cosine


def test_warmup_cosine_schedule():
    assert warmup_cosine(0, total_steps=100, warmup_steps=5) == pytest.approx(0.2)
    assert warmup_cosine(4, total_steps=100, warmup_steps=5) == pytest.approx(1.0)
    assert warmup_cosine(5, total_steps=100, warmup_steps=5) == pytest.approx(1.0)
    middle = 5 + 95 / 2
    assert warmup_cosine(middle, total_steps=100, warmup_steps=5) == pytest.approx(0.5)
    assert warmup_cosine(100, total_steps=100, warmup_steps=5) == pytest.approx(0.0, abs=1e-12)
    values = [warmup_cosine(s, total_steps=100, warmup_steps=5) for s in range(5, 101)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_paper_recipe_is_applied(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny)
    model.train(max_steps=20, batch_size=32, enable_progress_bar=False)
    plan = model.trainer.lightning_module
    trainer = model.trainer
    assert trainer.global_step == 20
    optimizer = trainer.optimizers[0]
    assert type(optimizer).__name__ == "AdamW"
    group = optimizer.param_groups[0]
    assert group["weight_decay"] == pytest.approx(1e-4)
    assert group["initial_lr"] == pytest.approx(2e-4)
    assert group["eps"] == pytest.approx(1e-8)
    # KL warm-up over 10 % of the 20 steps, to 5e-4
    assert plan.n_steps_kl_warmup == 2
    assert plan.max_kl_weight == pytest.approx(5e-4)
    assert float(plan.kl_weight) == pytest.approx(5e-4)
    # cosine decay ends at zero learning rate
    assert group["lr"] == pytest.approx(0.0, abs=1e-9)
    assert trainer.gradient_clip_val == 1.0
    assert model.is_trained


def test_module_is_back_in_training_mode_for_a_second_fit(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny)
    model.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    assert not model.module.training  # scvi leaves the module in eval mode after fit
    seen = []
    handle = model.module.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    model.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    handle.remove()
    assert seen
    assert all(seen)


def test_max_steps_sets_epochs(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, **tiny, prior="normal")
    model.train(max_steps=7, batch_size=100, enable_progress_bar=False)
    n_train = model.train_indices.size
    assert model.trainer.global_step == 7
    assert model.trainer.max_epochs == math.ceil(7 / math.ceil(n_train / 100))
    assert np.isfinite(model.history["train_loss"].to_numpy(dtype=float)).all()


def test_recipe_trainer_kwargs_fill_only_what_the_user_left_unset():
    assert recipe_trainer_kwargs({}, uses_cuda=False) == {"gradient_clip_val": 1.0}
    assert recipe_trainer_kwargs({"gradient_clip_val": 0.5}, uses_cuda=False) == {"gradient_clip_val": 0.5}
    # CPU training is never switched to bf16, whatever the CPU supports.
    assert "precision" not in recipe_trainer_kwargs({"logger": False}, uses_cuda=False)
