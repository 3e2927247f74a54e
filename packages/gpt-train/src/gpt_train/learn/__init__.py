"""`gpt-train learn`: graded exercises that rebuild each of gpt-core's kernels and end in a model trained on them.

A learner writes one function per step in a folder of their own (`start` gives the stub), `check` grades it in
float64 against PyTorch on `gpt-train verify`'s cases and names the classic mistake it matches, and `train`
trains the seed task with every kernel passed so far.
"""
