"""`gpt-train learn`: graded exercises that rebuild each of gpt-core's kernels, then assemble the model from modules
of the learner's own, write its training step and its generation, and end in the learner's GPT trained on their
kernels.

A learner writes one function (or, in the module steps, one nn.Module) per step in a folder of their own (`start`
gives the stub); `check` grades a kernel in float64 against PyTorch on `gpt-train verify`'s cases and the course's
own (`grader`), a module beside gpt-core's on copied weights (`assembly`), a training step beside gpt-train's own
(`training_step_check`) and generation beside gpt-core's `generate` (`generation_check`), refuses the built-ins and
gpt-core's own code inside it (`watch`), and names the classic mistake it matches (`zoo`); `train` trains the seed
task on the learner's GPT with every kernel passed so far (`training`).
"""
