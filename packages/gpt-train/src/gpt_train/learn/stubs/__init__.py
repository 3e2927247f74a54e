"""The task step's stub, which its answer extends; every other step's stub is written from its answer (`steps.stub`)."""
