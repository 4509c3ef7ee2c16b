"""What training prints: scvi-tools' progress bar, a logging interval that fits the epoch, info-level notes."""

from __future__ import annotations

import logging
import warnings

from sctrilemma import SCTrilemma


def test_train_shows_scvi_tools_progress_bar_without_an_interval_warning(small_adata, tiny, caplog, capsys):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        model.train(max_epochs=1)  # 2 steps per epoch, fewer than scvi-tools' logging interval of 10
    messages = [str(w.message) for w in caught]
    for unwanted in ("smaller than the logging interval", "dataset-donor groups"):
        assert not any(unwanted in message for message in messages), messages
    # 5 donors for M=8 codes is expected: said at info level, not warned.
    assert any(
        r.levelno == logging.INFO and "Only 5 dataset-donor groups for 8 pseudo-bulk centroids" in r.getMessage()
        for r in caplog.records
    )
    bar = capsys.readouterr()
    assert "Epoch 1/1" in bar.out + bar.err
    assert "train_loss" in bar.out + bar.err


def test_a_run_ended_by_max_steps_shows_its_last_epoch(small_adata, tiny, capsys):
    """``train()``'s default length is in steps: the bar still says how many epochs it will run."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_steps=7, batch_size=100)  # 4 batches per epoch: the 7th step is in epoch 2
    bar = capsys.readouterr()
    assert "Epoch 2/2" in bar.out + bar.err
    assert "Epoch 3" not in bar.out + bar.err
    assert model.trainer.global_step == 7


def test_a_time_budget_shows_seconds_not_epochs(small_adata, tiny, capsys):
    """Under ``max_time`` the bar counts the budget's seconds; ``max_epochs`` is only an upper bound."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_epochs=10_000, max_time={"seconds": 3}, batch_size=100)
    bar = capsys.readouterr()
    shown = bar.out + bar.err
    assert "/10000" not in shown
    assert "3/3 [" in shown  # the budget's seconds, all spent
    assert "Epoch 1, seconds" in shown
    assert model.trainer.current_epoch < 10_000
