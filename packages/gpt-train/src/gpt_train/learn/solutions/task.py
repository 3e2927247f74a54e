"""The task step's answer: the stub's task with `sequences` written, each digit of the prompt plus one, modulo 10."""

import torch

from gpt_tasks import digits_of
from gpt_train.learn.stubs.task import MyTask


class ShiftTask(MyTask):
    name = "shift"
    description = "add one to each digit, modulo 10"

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """The digits, then each plus one modulo 10: (N, 2 * length)."""
        digits = digits_of(ids, self.params.length, 10)  # (N, length)
        return torch.cat((digits, (digits + 1) % 10), dim=1)
