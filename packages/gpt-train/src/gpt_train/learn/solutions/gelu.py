"""Step 4: GELU, the activation between GPT-2's two MLP matrices, in the tanh form GPT-2 uses.

    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

(the exact GELU is x Phi(x) with Phi the normal CDF, written with erf; this is its tanh approximation).

Check it with `gpt-train learn check gelu`: it refuses F.gelu and nn.GELU (torch.tanh is yours to use).
"""

import torch


def gelu(x: torch.Tensor) -> torch.Tensor:
    """x: any shape -> the same shape.

    Hint: torch.tanh is stable for any input; a tanh written by hand with exp overflows on x = 100.
    """
    # BEGIN SOLUTION
    return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))
    # END SOLUTION
