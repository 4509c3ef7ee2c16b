from __future__ import annotations

import logging
import math
from datetime import timedelta

import numpy as np
import pytest
import scvi
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping

from sctrilemma import SCTrilemma
from sctrilemma.model import _presets
from sctrilemma.model._presets import PRESETS, trainer_arguments
from sctrilemma.train import warmup_cosine
from sctrilemma.train._trainingplan import planned_warmup


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
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_steps=20, batch_size=32, enable_progress_bar=False)
    plan = model.trainer.lightning_module
    trainer = model.trainer
    assert trainer.global_step == 20
    optimizer = trainer.optimizers[0]
    assert type(optimizer).__name__ == "AdamW"
    (group,) = optimizer.param_groups  # one learning rate for every weight
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
    model = SCTrilemma(small_adata, **tiny, preset="paper")
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
    model = SCTrilemma(small_adata, **tiny, prior="normal", preset="paper")
    model.train(max_steps=7, batch_size=100, enable_progress_bar=False)
    n_train = model.train_indices.size
    assert model.trainer.global_step == 7
    assert model.trainer.max_epochs == math.ceil(7 / math.ceil(n_train / 100))
    assert np.isfinite(model.history["train_loss"].to_numpy(dtype=float)).all()


@pytest.mark.parametrize("preset", ["small", "paper"])
def test_train_without_a_length_uses_the_presets_default(small_adata, tiny, monkeypatch, preset):
    """``model.train()`` as scVI users call it: the small preset's default steps, the paper preset's epochs."""
    monkeypatch.setitem(PRESETS["small"]["train"], "max_steps", 5)
    monkeypatch.setitem(PRESETS["paper"]["train"], "max_epochs_cap", 2)
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset=preset, **tiny, prior="normal")
    model.train(batch_size=100, enable_progress_bar=False)
    n_batches = math.ceil(model.train_indices.size / 100)
    assert model.trainer.global_step == (5 if preset == "small" else 2 * n_batches)


def test_small_preset_trains_one_pass_when_its_default_steps_do_not_cover_the_cells(small_adata, tiny, monkeypatch):
    """A data set larger than the default steps cover trains one pass over its training cells, every cell seen once."""
    monkeypatch.setitem(PRESETS["small"]["train"], "max_steps", 2)
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset="small", **tiny, prior="normal")
    model.train(batch_size=50, enable_progress_bar=False)
    n_batches = math.ceil(model.train_indices.size / 50)
    assert n_batches > 2
    assert model.trainer.global_step == n_batches


def test_default_training_length():
    default = PRESETS["small"]["train"]["max_steps"]
    assert _presets.training_length("small", 1_000_000, None, None) == (None, default)
    assert _presets.training_length("small", 8_684, None, None, steps_per_epoch=123) == (None, default)
    assert _presets.training_length("small", 1_000_000, None, None, steps_per_epoch=14_063) == (None, 14_063)
    assert _presets.training_length("small", 1_000_000, None, 300, steps_per_epoch=14_063) == (None, 300)
    assert _presets.training_length("paper", 10_000, None, None) == (50, None)
    assert _presets.training_length("paper", 40_000, None, None) == (25, None)  # scVI's heuristic decays above 20,000
    assert _presets.training_length("small", 10_000, 3, None) == (3, None)  # a given length is kept
    assert _presets.training_length("paper", 10_000, None, 7) == (None, 7)


def _recipe(preset: str, trainer_kwargs: dict, **recipe) -> dict:
    """The paper preset's trainer keywords with threads chosen by the user (no tuner) unless a test says otherwise."""
    chosen = {"early_stopping": None, "weight_averaging": None, "uses_cuda": False, "has_validation_cells": True}
    return trainer_arguments(preset, trainer_kwargs, **{**chosen, **recipe})


def test_the_recipe_fills_only_what_the_user_left_unset(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # threads chosen: no thread tuner
    assert _recipe("paper", {}) == {"gradient_clip_val": 1.0}
    assert _recipe("paper", {"gradient_clip_val": 0.5}) == {"gradient_clip_val": 0.5}
    # CPU training is never switched to bf16, whatever the CPU supports.
    assert "precision" not in _recipe("paper", {"logger": False})


def test_cosine_follows_the_time_budget_when_it_is_spent_faster():
    assert warmup_cosine(10, total_steps=math.inf, warmup_steps=5, time_progress=0.0) == pytest.approx(1.0)
    assert warmup_cosine(10, total_steps=math.inf, warmup_steps=5, time_progress=0.5) == pytest.approx(0.5)
    assert warmup_cosine(10, total_steps=math.inf, warmup_steps=5, time_progress=1.2) == pytest.approx(0.0, abs=1e-12)
    # steps spent faster than time: the step progress wins
    assert warmup_cosine(55, total_steps=105, warmup_steps=5, time_progress=0.1) == pytest.approx(0.5)


def test_warmups_are_capped_in_steps_whatever_the_planned_total():
    assert planned_warmup(0.05, 1250, 25_000) == 1250  # the paper's recipe: 5 % of 25,000 steps
    assert planned_warmup(0.05, 1250, 400) == 20  # a short planned run: 5 % of it
    assert planned_warmup(0.05, 1250, 10_000 * 60) == 1250  # max_epochs=10_000 (a time budget): the cap
    assert planned_warmup(0.05, 50, math.inf) == 50


@pytest.mark.slow  # trains for 20 s of wall clock
def test_a_max_time_run_leaves_its_warmups(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    model.train(
        max_epochs=10_000,
        max_time=timedelta(seconds=20),
        batch_size=32,
        enable_progress_bar=False,
        plan_kwargs={"max_lr_warmup_steps": 3, "max_kl_warmup_steps": 4},
    )
    plan, trainer = model.trainer.lightning_module, model.trainer
    assert trainer.current_epoch < 10_000  # stopped by the clock
    assert trainer.global_step > 4
    assert plan.n_steps_kl_warmup == 4  # not 10 % of the 10,000 planned epochs
    assert float(plan.kl_weight) == pytest.approx(plan.max_kl_weight)
    group = trainer.optimizers[0].param_groups[0]
    # past the 3-step warm-up, and decayed along the time budget rather than the 10,000 epochs
    assert group["lr"] < 0.5 * group["initial_lr"]
    assert np.isfinite(model.history["train_loss"].to_numpy(dtype=float)).all()


class RecordRates(Callback):
    """Records the optimizer groups' learning rates before every step."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, ...]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(tuple(group["lr"] for group in trainer.optimizers[0].param_groups))


def test_decoder_gene_offsets_learn_at_their_own_rate(small_adata, tiny):
    """The decoder's gene offsets are their own optimizer group, at a multiple of the rate."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    offset = model.module.decoder.gene_offset.weight
    rates = RecordRates()
    model.train(
        max_steps=4,
        batch_size=32,
        enable_progress_bar=False,
        plan_kwargs={"decoder_gene_offset_lr_scale": 3.0, "encoder_lr_steps": "run"},
        callbacks=[rates],
    )
    shared, own = model.trainer.optimizers[0].param_groups
    assert len(own["params"]) == 1
    assert own["params"][0] is offset
    assert all(p is not offset for p in shared["params"])
    assert len(shared["params"]) == sum(1 for p in model.module.parameters() if p.requires_grad) - 1
    assert own["initial_lr"] == pytest.approx(3.0 * shared["initial_lr"])
    # the warm-up and cosine decay scale both groups at every step
    assert len(rates.seen) == 4
    for lr, offset_lr in rates.seen:
        assert lr > 0
        assert offset_lr == pytest.approx(3.0 * lr)
    # the small preset's default: the offsets at twice the rate, beside the encoder's own group
    model.train(max_steps=1, batch_size=32, enable_progress_bar=False)
    plan = model.trainer.lightning_module
    assert plan.decoder_gene_offset_lr_scale == 2.0
    encoder, shared, own = model.trainer.optimizers[0].param_groups
    assert (encoder["encoder"], shared["encoder"], own["encoder"]) == (True, False, False)
    assert len(own["params"]) == 1
    assert own["params"][0] is offset
    assert own["initial_lr"] == pytest.approx(2.0 * shared["initial_lr"])
    assert encoder["initial_lr"] == pytest.approx(shared["initial_lr"])
    # a module without offsets ignores their rate: no group of its own
    paper_like = SCTrilemma(small_adata, preset="small", decoder_gene_offset=False, **tiny)
    paper_like.train(max_steps=1, batch_size=32, enable_progress_bar=False, plan_kwargs={"encoder_lr_steps": "run"})
    assert len(paper_like.trainer.optimizers[0].param_groups) == 1
    for wrong in (0.0, -1.0, "auto", True):
        with pytest.raises(ValueError, match="`decoder_gene_offset_lr_scale` must be a positive number"):
            model.train(max_steps=1, enable_progress_bar=False, plan_kwargs={"decoder_gene_offset_lr_scale": wrong})


class RecordEncoder(Callback):
    """Records the encoder's weights and BatchNorm statistics and the decoder's weights after every step."""

    def __init__(self) -> None:
        self.encoder: list[dict[str, torch.Tensor]] = []
        self.decoder: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.encoder.append({k: v.detach().clone() for k, v in pl_module.module.encoder.state_dict().items()})
        self.decoder.append({k: v.detach().clone() for k, v in pl_module.module.decoder.state_dict().items()})


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Equal weights and statistics (a BatchNorm's count of batches aside)."""
    return all(torch.equal(a[name], b[name]) for name in a if a[name].is_floating_point())


def test_the_encoder_stops_after_its_own_schedule_while_the_decoder_trains_on(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    assert model.module.encoder.posterior_norm.momentum == 0.1
    rates, weights = RecordRates(), RecordEncoder()
    model.train(
        max_steps=12,
        batch_size=32,
        enable_progress_bar=False,
        early_stopping=False,
        plan_kwargs={"encoder_lr_steps": 6},
        callbacks=[rates, weights],
    )
    encoder_lr, shared_lr, _ = zip(*rates.seen, strict=True)
    # the encoder's cosine is sized to its 6 steps, the others' to the run's 12 (a one-step warm-up for both)
    assert encoder_lr[:2] == pytest.approx(shared_lr[:2])
    assert all(0 < e < s for e, s in zip(encoder_lr[2:6], shared_lr[2:6], strict=True))
    assert all(e == 0.0 for e in encoder_lr[6:])
    assert all(s > 0 for s in shared_lr[6:])
    # from the sixth step on the encoder, and its BatchNorm statistics, stay as they are; the decoder moves
    assert not _equal(weights.encoder[4], weights.encoder[5])
    assert all(_equal(weights.encoder[5], later) for later in weights.encoder[6:])
    assert not _equal(weights.decoder[5], weights.decoder[-1])
    # after training, the encoder is left as the caller had it
    assert all(p.requires_grad for p in model.module.parameters())
    assert model.module.encoder.posterior_norm.momentum == 0.1
    # a run no longer than the encoder's schedule: one schedule for all, as without it
    rates = RecordRates()
    model.train(max_steps=5, batch_size=32, enable_progress_bar=False, early_stopping=False, callbacks=[rates])
    assert model.trainer.lightning_module.encoder_lr_steps == PRESETS["small"]["plan"]["encoder_lr_steps"] == 1200
    for encoder, shared, _ in rates.seen:
        assert encoder == pytest.approx(shared)
    for wrong in (0, -3, 2.5, True, "1200"):
        with pytest.raises(ValueError, match="`encoder_lr_steps` must be a positive integer"):
            model.train(max_steps=1, enable_progress_bar=False, plan_kwargs={"encoder_lr_steps": wrong})


def test_a_run_within_the_encoders_schedule_is_unchanged_by_it(small_adata, tiny):
    """Up to ``encoder_lr_steps`` the encoder's own group trains exactly as the single group did, bit for bit."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    embeddings = []
    for plan in ({"encoder_lr_steps": "run"}, {"encoder_lr_steps": 8}):
        scvi.settings.seed = 0
        model = SCTrilemma(small_adata, preset="small", **tiny)
        model.train(max_steps=8, batch_size=32, enable_progress_bar=False, plan_kwargs=plan)
        embeddings.append(model.get_latent_representation())
    np.testing.assert_array_equal(embeddings[0], embeddings[1])


class FailAtStep(Callback):
    """Raises once training reaches ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("stopped by the test")


def test_an_error_after_the_encoder_stopped_gives_it_back(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        model.train(
            max_steps=10,
            batch_size=32,
            enable_progress_bar=False,
            plan_kwargs={"encoder_lr_steps": 3},
            callbacks=[FailAtStep(6)],
        )
    assert all(p.requires_grad for p in model.module.parameters())
    assert model.module.encoder.posterior_norm.momentum == 0.1


def test_a_query_keeps_its_frozen_encoder_after_training(small_adata, tiny):
    """Training gives back only the ``requires_grad`` it took: a query's frozen reference weights stay frozen."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    frozen = [p for name, p in model.module.encoder.named_parameters() if not name.startswith("gene_embedding")]
    for parameter in frozen:
        parameter.requires_grad_(False)
    model.train(
        max_steps=6, batch_size=32, enable_progress_bar=False, early_stopping=False, plan_kwargs={"encoder_lr_steps": 3}
    )
    assert not any(p.requires_grad for p in frozen)
    assert model.module.encoder.gene_embedding.weight.requires_grad


def _early_stopping(callbacks) -> list[EarlyStopping]:
    return [c for c in callbacks or [] if isinstance(c, EarlyStopping)]


def test_early_stopping_follows_the_preset_unless_the_user_chose(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    kwargs = _recipe("small", {"callbacks": ["keep"]}, weight_averaging=False)
    (stopper,) = _early_stopping(kwargs["callbacks"])
    assert kwargs["callbacks"][0] == "keep"
    assert (stopper.monitor, stopper.patience, stopper.strict) == ("reconstruction_loss_validation", 10, False)
    assert kwargs["check_val_every_n_epoch"] == 1
    assert _early_stopping(_recipe("small", {}, early_stopping=False).get("callbacks")) == []
    # scvi-tools' keywords set the stop, on either preset
    chosen = _recipe(
        "paper", {"early_stopping_patience": 3, "early_stopping_monitor": "elbo_validation"}, early_stopping=True
    )
    (stopper,) = _early_stopping(chosen["callbacks"])
    assert (stopper.monitor, stopper.patience) == ("elbo_validation", 3)
    assert "early_stopping_patience" not in chosen
    assert _early_stopping(_recipe("small", {"max_time": 5}, has_validation_cells=False).get("callbacks")) == []
    assert _early_stopping(_recipe("paper", {}).get("callbacks")) == []  # the paper trains a fixed length
    assert (_early_stopping(_recipe("small", {"early_stopping_patience": 4})["callbacks"])[0]).patience == 4


def test_small_preset_stops_when_the_validation_reconstruction_stops_improving(small_adata, tiny, monkeypatch, caplog):
    monkeypatch.setitem(PRESETS["small"]["train"], "early_stopping_patience", 1)
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset="small", **tiny, prior="normal", posterior_logvar_init=2.0)
    # At a learning rate this high the validation loss stops improving within a few epochs.
    with caplog.at_level(logging.INFO):
        model.train(max_epochs=40, batch_size=100, plan_kwargs={"lr": 1.0}, enable_progress_bar=False)
    said = [r.getMessage() for r in caplog.records]
    stops = [m for m in said if m.startswith("Early stopping ended training")]
    assert len(stops) == 1, said  # one line, saying why and how to train on
    assert "had not improved for 1 epochs" in stops[0]
    assert "`early_stopping=False`" in stops[0]
    assert sum(m.startswith("Training ended with the moving average") for m in said) == 1
    (stopper,) = _early_stopping(model.trainer.callbacks)
    assert stopper.monitor == "reconstruction_loss_validation"
    assert 0 < stopper.stopped_epoch < 39  # Lightning records the epoch at which it stopped the run
    assert len(model.history["reconstruction_loss_validation"]) == stopper.stopped_epoch + 1


def test_a_run_shorter_than_an_epoch_or_without_validation_cells_trains_its_full_length(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset="small", **tiny, prior="normal")
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)  # 12 steps per epoch: no validation yet
    assert model.trainer.global_step == 2
    model.train(max_steps=6, train_size=1.0, batch_size=100, enable_progress_bar=False)
    assert not _early_stopping(model.trainer.callbacks)
    assert model.trainer.global_step == 6
