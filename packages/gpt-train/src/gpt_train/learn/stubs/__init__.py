"""The stub `gpt-train learn start STEP` writes, one file per step (the task step's answer builds on its stub)."""
