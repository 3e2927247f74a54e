"""The stub `gpt-train learn start STEP` writes, one file per step, read as text (never imported)."""
