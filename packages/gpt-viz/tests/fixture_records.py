"""The head-ablation record (inspect_heads.json) the explorer and picture tests draw: the fixture run's 2 layers x
4 heads; head 1.1 zero-ablated leaves 0.0, the lowest."""

HEADS_ABLATION = {
    "metric": "exact_match",
    "split": "heldout",
    "examples": 200,
    "baseline": 0.98,
    "zero": [[0.1, 0.97, 0.98, 0.5], [0.9, 0.0, 0.98, 0.97]],
    "mean": [[0.6, 0.98, 0.98, 0.9], [0.95, 0.3, 0.99, 0.98]],
}
