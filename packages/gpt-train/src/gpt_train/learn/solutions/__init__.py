"""Each step's lesson, hints and passing answer, one file a step: `learn start` writes the stub from it (`steps.stub`),
and a learner's folder of these files passes every step (the tests and the docs' transcript use them)."""
