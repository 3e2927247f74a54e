"""`python -m gpt_train` (and `torchrun -m gpt_train`) run the gpt-train command."""

from gpt_train.cli import main

main()
