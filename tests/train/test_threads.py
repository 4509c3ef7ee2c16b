"""CPU training and inference at the fastest thread count, measured on their own steps."""

from __future__ import annotations

import pytest
import torch

from sctrilemma import SCTrilemma
from sctrilemma.model._presets import trainer_arguments
from sctrilemma.train import CpuThreadTuner, ThreadChooser, ThreadTunedLoader, _threads
from sctrilemma.train._threads import thread_candidates


class StepClock:
    """A clock under which one training step takes ``seconds[threads]``, whatever the machine does."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds, self.now, self.started = seconds, 0.0, False

    def __call__(self) -> float:
        if self.started:  # the end of a step
            self.now += self.seconds[torch.get_num_threads()]
        self.started = not self.started
        return self.now


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def _train_with(tuner: CpuThreadTuner, adata, tiny) -> SCTrilemma:
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **tiny, preset="small")
    model.train(max_steps=30, accelerator="cpu", enable_progress_bar=False, callbacks=[tuner])
    return model


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        ({2: 0.30, 1: 0.10}, 1),  # a busy machine: the second thread waits for a descheduled core
        ({2: 0.05, 1: 0.10}, 2),  # an idle machine: two threads are twice as fast
        ({2: 0.095, 1: 0.10}, 1),  # within the tolerance: fewer threads
    ],
)
def test_trains_at_the_fastest_count_and_restores_threads(small_adata, tiny, two_threads, seconds, expected):
    tuner = CpuThreadTuner(first_check=2, probe_steps=3, recheck_s=0.5, clock=StepClock(seconds))
    _train_with(tuner, small_adata, tiny)
    assert tuner.candidates == [1, 2]
    assert len(tuner.history) >= 2  # measured again as the run goes on
    assert {threads for _, threads in tuner.history} == {expected}
    # a count more than twice as slow as the best is dropped after one step
    assert len(tuner.timings[2]) == (1 if seconds[2] > 2 * seconds[1] else 3)
    assert torch.get_num_threads() == 2  # the user's setting after training


def test_one_thread_has_nothing_to_tune(small_adata, tiny):
    torch.set_num_threads(1)
    tuner = CpuThreadTuner(first_check=1)
    _train_with(tuner, small_adata, tiny)
    assert tuner.history == []
    assert torch.get_num_threads() == 1


def test_candidates():
    assert thread_candidates(8) == [1, 4, 8]
    assert thread_candidates(2) == [1, 2]
    assert thread_candidates(1) == [1]


def _paper_recipe(uses_cuda: bool) -> dict:
    """The paper preset's trainer keywords (no early stopping or weight average), on CPU or CUDA."""
    recipe = {"early_stopping": None, "weight_averaging": None, "has_validation_cells": True}
    return trainer_arguments("paper", {}, uses_cuda=uses_cuda, **recipe)


def test_a_users_thread_choice_is_kept(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(_threads, "THREADS_AT_IMPORT", torch.get_num_threads())
    added = _paper_recipe(uses_cuda=False)["callbacks"]
    assert [type(callback) for callback in added] == [CpuThreadTuner]
    assert "callbacks" not in _paper_recipe(uses_cuda=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert "callbacks" not in _paper_recipe(uses_cuda=False)
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(_threads, "THREADS_AT_IMPORT", torch.get_num_threads() + 1)  # set after import
    assert "callbacks" not in _paper_recipe(uses_cuda=False)


def test_tuned_loader_yields_every_batch_and_restores_threads(two_threads):
    clock = StepClock({2: 0.30, 1: 0.10})
    chooser = ThreadChooser(first_check=1, probe_steps=2, recheck_s=100.0, clock=clock)
    loader = ThreadTunedLoader(list(range(12)), chooser)
    assert len(loader) == 12
    seen = []
    for batch in loader:
        seen.append((batch, torch.get_num_threads()))
    assert [batch for batch, _ in seen] == list(range(12))
    assert chooser.history == [(3, 1)]  # batches 1-2 at one thread, batch 3 at two (dropped: three times slower)
    assert {threads for _, threads in seen[4:]} == {1}
    assert torch.get_num_threads() == 2
    # a second pass (another group of a DE, say) keeps the choice until it is due to be measured again
    assert [torch.get_num_threads() for _ in loader] == [1] * 12
    assert chooser.history == [(3, 1)]
    assert torch.get_num_threads() == 2


def test_inference_loaders_are_tuned_unless_the_user_chose(small_adata, tiny, monkeypatch):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="small")
    model.train(max_steps=2, accelerator="cpu", enable_progress_bar=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(_threads, "THREADS_AT_IMPORT", torch.get_num_threads())
    loader = model._make_data_loader(adata=small_adata, batch_size=100)
    assert isinstance(loader, ThreadTunedLoader)
    assert loader.batch_size is None or loader.sampler.batch_size == 100  # the wrapped loader's attributes
    tuned = model.get_latent_representation()
    monkeypatch.setattr(_threads, "THREADS_AT_IMPORT", torch.get_num_threads() + 1)
    assert not isinstance(model._make_data_loader(adata=small_adata), ThreadTunedLoader)
    torch.testing.assert_close(torch.as_tensor(tuned), torch.as_tensor(model.get_latent_representation()))
