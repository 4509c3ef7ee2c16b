from __future__ import annotations

import logging
import warnings

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from sctrilemma import SCTrilemma
from sctrilemma.model._logging import LIGHTNING_INFO_LOGGER, StepProgressBar, quiet_lightning, training_display_kwargs

LEAFSPEC_MESSAGE = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


def test_logging_interval_fits_the_epoch():
    assert training_display_kwargs({}, 2)["log_every_n_steps"] == 2
    assert training_display_kwargs({}, 500)["log_every_n_steps"] == 10
    assert training_display_kwargs({"log_every_n_steps": 50}, 2)["log_every_n_steps"] == 50
    assert "log_every_n_steps" not in training_display_kwargs({}, None)


def test_step_progress_bar_unless_the_user_chose_a_bar():
    kwargs = training_display_kwargs({"callbacks": ["keep"]}, 4)
    assert kwargs["simple_progress_bar"] is False
    assert kwargs["callbacks"][0] == "keep"
    assert isinstance(kwargs["callbacks"][1], StepProgressBar)
    for chosen in ({"enable_progress_bar": False}, {"simple_progress_bar": True}, {"callbacks": [TQDMProgressBar()]}):
        kwargs = training_display_kwargs(chosen, 4)
        assert not any(isinstance(c, StepProgressBar) for c in kwargs.get("callbacks", []))
        assert kwargs.get("simple_progress_bar", True) is chosen.get("simple_progress_bar", True)


def test_quiet_lightning_is_narrow(caplog):
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_lightning():
            rank_zero_info("GPU available: False, used: False")
            warnings.warn(LEAFSPEC_MESSAGE, FutureWarning, stacklevel=1)
            warnings.warn("You defined a `validation_step` but have no `val_dataloader`.", UserWarning, stacklevel=1)
            warnings.warn("something the user should fix", FutureWarning, stacklevel=1)
            warnings.warn("The number of training batches (2) is smaller", UserWarning, stacklevel=1)
    assert "GPU available" not in caplog.text
    assert [str(w.message) for w in caught] == [
        "something the user should fix",
        "The number of training batches (2) is smaller",
    ]
    assert logging.getLogger(LIGHTNING_INFO_LOGGER).level == logging.NOTSET


def test_quiet_lightning_keeps_a_level_the_user_set(caplog):
    info_logger = logging.getLogger(LIGHTNING_INFO_LOGGER)
    info_logger.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO), quiet_lightning():
            rank_zero_info("GPU available: False, used: False")
        assert "GPU available" in caplog.text
        assert info_logger.level == logging.INFO
    finally:
        info_logger.setLevel(logging.NOTSET)


def test_train_prints_steps_with_loss_and_no_lightning_chatter(small_adata, tiny, caplog, capsys):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        model.train(max_epochs=1)
    messages = [str(w.message) for w in caught]
    for unwanted in ("LeafSpec", "smaller than the logging interval", "dataset-donor groups"):
        assert not any(unwanted in message for message in messages), messages
    assert "GPU available" not in caplog.text
    assert "litlogger" not in caplog.text
    # 5 donors for M=8 codes is expected: said at info level, not warned.
    assert any(
        r.levelno == logging.INFO and "Only 5 dataset-donor groups for 8 pseudo-bulk centroids" in r.getMessage()
        for r in caplog.records
    )
    bar = capsys.readouterr()
    assert "Epoch 1/1" in bar.out + bar.err
    assert "loss=" in bar.out + bar.err


def test_a_run_ended_by_max_steps_shows_its_last_epoch(small_adata, tiny, capsys):
    """``train()``'s default length is in steps: the bar still says how many epochs it will run."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_steps=7, batch_size=100)  # 4 batches per epoch: the 7th step is in epoch 2
    bar = capsys.readouterr()
    assert "Epoch 2/2" in bar.out + bar.err
    assert "Epoch 3" not in bar.out + bar.err
