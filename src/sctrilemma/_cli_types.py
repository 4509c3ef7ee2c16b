"""Argument types of the ``sctrilemma`` command line: each checks its value before anything is read."""

from __future__ import annotations

import argparse
import math
import re
from datetime import timedelta

MAX_TIME_FORMAT = "DD:HH:MM:SS as in Lightning's max_time (e.g. 00:00:04:00) or a number of seconds (e.g. 240)"
MAX_SEED = 2**32 - 1  # Lightning's seed_everything replaces a seed outside [0, 2**32 - 1] with a random one


def positive_int(text: str) -> int:
    """A positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def unit_fraction(text: str) -> float:
    """A number in ``(0, 1]``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def seed(text: str) -> int:
    """A seed Lightning accepts: an integer from 0 to 2**32 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_SEED}, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_SEED}, got {value}")
    return value


def time_budget(text: str) -> timedelta:
    """``--max-time``: ``DD:HH:MM:SS`` (exactly four fields, as Lightning reads ``max_time``) or seconds."""
    text = text.strip()
    try:
        if re.fullmatch(r"\d+:\d+:\d+:\d+", text):
            days, hours, minutes, seconds = (int(field) for field in text.split(":"))
            budget = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        else:
            # float() refuses a three-field 00:04:00, which Lightning would read as 0 days and 4 hours.
            budget = timedelta(seconds=float(text)) if math.isfinite(float(text)) else None
    except (ValueError, OverflowError):
        budget = None
    if budget is None:
        raise argparse.ArgumentTypeError(f"expected {MAX_TIME_FORMAT}, got {text!r}")
    if budget <= timedelta(0):
        raise argparse.ArgumentTypeError(f"expected a positive time budget, got {text!r}")
    return budget
