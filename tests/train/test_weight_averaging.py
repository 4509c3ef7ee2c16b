from __future__ import annotations

import pytest
import torch
from lightning.pytorch.callbacks import Callback, EMAWeightAveraging, WeightAveraging

from sctrilemma import SCTrilemma
from sctrilemma.model._presets import trainer_arguments
from sctrilemma.train import ExponentialWeightAverage, SCTrilemmaTrainingPlan


def test_the_average_warms_up_then_decays_and_leaves_counters_to_the_model():
    average = ExponentialWeightAverage(decay=0.99)
    weights, counter = torch.zeros(3), torch.tensor(2)
    average.average([weights, counter], [torch.ones(3), torch.tensor(7)], torch.tensor(0))
    torch.testing.assert_close(weights, torch.full((3,), 0.9))  # decay (1 + n) / (10 + n) at n = 0
    assert counter.item() == 7
    average.average([weights], [torch.full((3,), 2.0)], torch.tensor(1_000))
    torch.testing.assert_close(weights, torch.full((3,), 0.9 * 0.99 + 2.0 * 0.01))  # the decay's cap
    with pytest.raises(ValueError, match="decay"):
        ExponentialWeightAverage(decay=1.0)


def _averages(preset: str, trainer_kwargs: dict, weight_averaging: bool | None) -> list:
    recipe = {"early_stopping": False, "uses_cuda": False, "has_validation_cells": True}
    kwargs = trainer_arguments(preset, trainer_kwargs, weight_averaging=weight_averaging, **recipe)
    return [c for c in kwargs.get("callbacks", []) if isinstance(c, WeightAveraging)]


def test_weight_averaging_follows_the_preset_unless_chosen():
    (small,) = _averages("small", {}, None)
    assert isinstance(small, ExponentialWeightAverage)
    assert small.decay == 0.99
    assert _averages("paper", {}, None) == []  # the paper's recipe keeps the trained weights
    assert _averages("small", {"max_time": 5}, False) == []
    assert isinstance(_averages("paper", {}, True)[0], ExponentialWeightAverage)
    own = EMAWeightAveraging(decay=0.9)
    assert _averages("small", {"callbacks": [own]}, None) == [own]


class _RecordWeights(Callback):
    """The count head's weight and the cells seen after every optimiser step."""

    def __init__(self) -> None:
        self.weights: list[torch.Tensor] = []
        self.cells = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.weights.append(pl_module.module.decoder.count_head.weight.detach().clone())
        self.cells += len(batch["X"])


def test_training_ends_with_the_warmed_average_of_every_steps_weights(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    record = _RecordWeights()
    model.train(max_steps=8, batch_size=32, early_stopping=False, enable_progress_bar=False, callbacks=[record])
    expected = record.weights[0]
    for n, weights in enumerate(record.weights[1:], start=1):  # n earlier updates
        rate = min(0.99, (1 + n) / (10 + n))
        expected = rate * expected + (1 - rate) * weights
    final = model.module.decoder.count_head.weight.detach()
    torch.testing.assert_close(final, expected)
    assert not torch.allclose(final, record.weights[-1])
    # The gene detection counts every training cell once: counters are the model's, not averaged.
    assert int(model.module.gene_detection.n_cells) == record.cells
    # The embedding is that of the averaged weights, whichever path computes it.
    saved = model.get_latent_representation()
    model.module.train()
    model.module.eval()
    torch.testing.assert_close(torch.as_tensor(model.get_latent_representation()), torch.as_tensor(saved))


def test_a_run_can_keep_the_trained_weights(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    record = _RecordWeights()
    model.train(
        max_steps=4,
        batch_size=32,
        early_stopping=False,
        enable_progress_bar=False,
        callbacks=[record],
        weight_averaging=False,
    )
    torch.testing.assert_close(model.module.decoder.count_head.weight.detach(), record.weights[-1])


def test_weights_copied_in_by_a_callback_are_the_ones_evaluated(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    model.train(max_steps=4, batch_size=32, early_stopping=False, enable_progress_bar=False)
    model.get_latent_representation()  # prepares the evaluation blocks
    with torch.no_grad():
        for parameter in model.module.encoder.blocks.parameters():  # as WeightAveraging swaps: no version bump
            parameter.data.copy_(parameter.data * 1.05)
    unannounced = torch.as_tensor(model.get_latent_representation())
    SCTrilemmaTrainingPlan(model.module).on_validation_epoch_start()
    swapped = torch.as_tensor(model.get_latent_representation())
    model.module.train()
    model.module.eval()
    rebuilt = torch.as_tensor(model.get_latent_representation())
    torch.testing.assert_close(swapped, rebuilt)
    assert not torch.allclose(unannounced, rebuilt, atol=1e-4)  # the blocks prepared from the old weights
