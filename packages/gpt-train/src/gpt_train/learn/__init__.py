"""`gpt-train learn`: graded exercises that rebuild each of gpt-core's kernels, then assemble the model from modules
of the learner's own, write its training step and its generation, and end in the learner's GPT trained on their
kernels.

`check` grades a kernel against PyTorch (`grader`), a module beside gpt-core's (`assembly`), a training step beside
gpt-train's (`training_step_check`), generation beside gpt-core's (`generation_check`), each verdict in one order
(`verdicts`); it refuses the built-ins inside (`watch`) and names the classic mistake (`zoo`). `train` trains the
seed task on the learner's GPT and kernels (`training`).
"""
