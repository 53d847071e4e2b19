"""TensorBoard scalars of every run: rank 0 writes them into the run's output folder, so that

    tensorboard --logdir results/<run-id>

overlays every run of a comparison (each run is a folder there), as Ray Train and Horovod users are used to.

Every scalar is on one x axis, the optimizer step: the step loss at each step, and the epoch's test loss and
accuracy, steady-state samples/s and comm share at the epoch's last step.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime import space

EPOCH_TAGS = {"test/loss": "test_loss", "test/accuracy": "test_accuracy", "speed/samples_per_s": "samples_per_s",
              "speed/comm_share": "comm_share"}
TAGS = {"train/step_loss", *EPOCH_TAGS}


class Scalars:
    def __init__(self, output_dir: str | Path, steps_done: int) -> None:
        self.output_dir, self.steps_done, self._writer = str(output_dir), steps_done, None
        # The run's folder from the start of training, without an events file yet: the ranks' heartbeats go in it.
        Path(output_dir).mkdir(parents=True, exist_ok=True)

    @property
    def writer(self):
        """Made at the first finished epoch: a run that fails before one leaves no events file."""
        if self._writer is None:
            # Imported here: it loads TensorBoard, which only rank 0 of a running job needs.
            from torch.utils.tensorboard import SummaryWriter

            # A resumed run first drops what an earlier attempt logged after its last checkpoint.
            self._writer = SummaryWriter(log_dir=self.output_dir, purge_step=self.steps_done or None)
        return self._writer

    def epoch(self, record: dict[str, Any], step_losses: list[float]) -> None:
        """One finished epoch; `step_losses` holds every step's loss of the run so far, this epoch's last."""
        first = len(step_losses) - record["steps"]
        for step in range(first, len(step_losses)):
            self.writer.add_scalar("train/step_loss", step_losses[step], step + 1)
        for tag, key in EPOCH_TAGS.items():
            self.writer.add_scalar(tag, record[key], len(step_losses))
        self._write(self.writer.flush)  # an epoch is in TensorBoard as soon as it is done, even if the run dies later

    def close(self) -> None:
        if self._writer is not None:
            self._write(self._writer.close)

    def _write(self, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as error:
            if space.is_full(error):
                raise space.full(self.writer.log_dir, "TensorBoard's scalars") from None
            raise
