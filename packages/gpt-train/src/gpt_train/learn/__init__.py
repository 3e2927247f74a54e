"""`gpt-train learn`: graded exercises that rebuild gpt-core's kernels, then its model, training step and generation,
and train the learner's GPT on their kernels (see docs/learn.md)."""
