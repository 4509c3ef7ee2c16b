"""CPU training that does not collapse when other programs share the cores.

PyTorch's threads wait for each other at every parallel operation. When another program takes one of the cores, the
thread on it is descheduled and the others wait for it: on 2 cores beside one busy process, small-preset training at
2 threads ran 2.7 times slower than at 1 thread, beside two 27 times (``benchmarks/contention.py``). So
training and inference on the CPU time a few steps at each candidate thread count now and then, and run at the
fastest.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from lightning.pytorch.callbacks import Callback

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable, Iterator

    import lightning.pytorch as pl

# torch's thread count when sctrilemma was imported: a different count at training time is the user's choice.
THREADS_AT_IMPORT = torch.get_num_threads()
THREAD_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def user_chose_threads() -> bool:
    """Whether the user set torch's thread count (``torch.set_num_threads`` or ``OMP_NUM_THREADS``)."""
    return torch.get_num_threads() != THREADS_AT_IMPORT or any(name in os.environ for name in THREAD_ENVIRONMENT)


@contextmanager
def torch_threads_kept() -> Generator[None, None, None]:
    """Restore torch's thread count on exit: scanpy's preprocessing raises it to the number of cores."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def thread_candidates(threads: int) -> list[int]:
    """The counts compared, fewest first: one, half of ``threads`` and all of them."""
    return sorted({threads, (threads + 1) // 2, 1})


class ThreadChooser:
    """Run steps at the fastest of a few thread counts, measured on the steps themselves and re-measured as they go.

    Steps start on one thread. From step ``first_check`` each count of ``thread_candidates`` runs
    ``probe_steps`` steps, fewest threads first, and the steps continue at the count with the shortest median;
    more threads must be faster by ``tolerance`` to be chosen. A count whose first step takes more than
    ``abort_ratio`` times the best median so far is dropped at once: beside busy programs one step with too many
    threads can take seconds. The measurement repeats after ``recheck_s`` seconds, an interval that doubles (up to
    ``max_recheck_s``) while the choice holds. :meth:`~sctrilemma.train.ThreadChooser.restore` gives torch back
    its thread count.

    Parameters
    ----------
    first_check
        Step of the first measurement (the first steps are slower while buffers are allocated).
    probe_steps
        Steps timed per count.
    tolerance
        Relative margin by which more threads must be faster to be chosen.
    abort_ratio
        A count whose first step is this many times slower than the best so far is not timed further.
    recheck_s, max_recheck_s
        Seconds between measurements, at first and at most.
    clock
        Seconds since an arbitrary point (tests pass a fake one).
    """

    def __init__(
        self,
        first_check: int = 10,
        probe_steps: int = 4,
        tolerance: float = 0.1,
        abort_ratio: float = 2.0,
        recheck_s: float = 30.0,
        max_recheck_s: float = 480.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        self.first_check, self.probe_steps = first_check, probe_steps
        self.tolerance, self.abort_ratio = tolerance, abort_ratio
        self.recheck_s, self.max_recheck_s, self.clock = recheck_s, max_recheck_s, clock
        self.start()

    def start(self) -> None:
        """Begin at torch's current thread count, which sets the candidates and what ``restore`` returns to."""
        self.original_threads = torch.get_num_threads()
        self.candidates = thread_candidates(self.original_threads)
        self.chosen = self.candidates[0]
        self.interval = self.recheck_s
        self.next_check: float | None = None  # clock time of the next measurement; None until first_check
        self.timings: dict[int, list[float]] = {}
        self.probe_queue: list[int] = []
        self.step_start = 0.0
        self.history: list[tuple[int, int]] = []  # (step, threads chosen), for reports and tests

    def before_step(self, step: int) -> None:
        """Set the thread count for step ``step`` and start its clock."""
        now = self.clock()
        if len(self.candidates) < 2:
            return
        due = step >= self.first_check if self.next_check is None else now >= self.next_check
        if not self.probe_queue and due:
            self.timings = {threads: [] for threads in self.candidates}
            self.probe_queue = [threads for threads in self.candidates for _ in range(self.probe_steps)]
        threads = self.probe_queue[0] if self.probe_queue else self.chosen
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        self.step_start = now

    def after_step(self, step: int) -> None:
        """Record step ``step``'s time if it was measured; choose once every count has been timed."""
        now = self.clock()  # read at every step's start and end
        if not self.probe_queue:
            return
        threads = self.probe_queue.pop(0)
        self.timings[threads].append(now - self.step_start)
        measured = [_median(times) for count, times in self.timings.items() if times and count != threads]
        if measured and self.timings[threads][-1] > self.abort_ratio * min(measured):
            self.probe_queue = [count for count in self.probe_queue if count != threads]
        if not self.probe_queue:
            self._choose(step, now)

    def _choose(self, step: int, now: float) -> None:
        medians = {threads: _median(times) for threads, times in self.timings.items() if times}
        fastest = min(medians, key=medians.get)
        chosen = min(threads for threads in medians if medians[threads] <= (1 + self.tolerance) * medians[fastest])
        self.interval = min(2 * self.interval, self.max_recheck_s) if chosen == self.chosen else self.recheck_s
        self.chosen = chosen
        self.history.append((step, chosen))
        self.next_check = now + self.interval
        torch.set_num_threads(chosen)

    def resume(self) -> None:
        """Begin a new pass, keeping the last choice and its next measurement if torch's thread count is unchanged.

        Otherwise (or before any choice) as :meth:`~sctrilemma.train.ThreadChooser.start`.
        """
        if not self.history or torch.get_num_threads() != self.original_threads:
            self.start()
            return
        self.probe_queue = []

    def restore(self) -> None:
        """Give torch back the thread count it had at :meth:`~sctrilemma.train.ThreadChooser.start`."""
        torch.set_num_threads(self.original_threads)


class CpuThreadTuner(ThreadChooser, Callback):
    """CPU training at the fastest thread count: :class:`~sctrilemma.train.ThreadChooser` as a Lightning callback."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        self.before_step(trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        self.after_step(trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.restore()


class ThreadTunedLoader:
    """A data loader whose batches run on the CPU at the fastest thread count: :class:`~sctrilemma.train.ThreadChooser`.

    The time between handing out one batch and being asked for the next is that batch's step. By default all
    inference loaders share one chooser, so that a choice made on one pass (say, one group of a differential
    expression) serves the next ones until it is due to be measured again. Attributes are the wrapped loader's.
    """

    def __init__(self, loader: Iterable, chooser: ThreadChooser | None = None) -> None:
        self.loader = loader
        self.chooser = chooser or INFERENCE_CHOOSER

    def __iter__(self) -> Iterator:
        self.chooser.resume()
        try:
            for step, batch in enumerate(self.loader):
                self.chooser.before_step(step)
                yield batch
                self.chooser.after_step(step)
        finally:
            self.chooser.restore()

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name == "loader":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


# Inference passes are often short (a few batches each in differential expression): they share one measurement.
INFERENCE_CHOOSER = ThreadChooser(first_check=1, probe_steps=2)
