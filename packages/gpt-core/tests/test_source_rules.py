"""The house rule, enforced: gpt-core's source never uses torch.nn.functional or torch's built-in
layers; every piece is hand-written. Comments and string literals (docstrings that *name* the
built-ins) are stripped before scanning, so only code counts.

The one sanctioned use of built-ins is verification.py calling the namespace it is *given*
(`ref.linear(...)`, `ref.scaled_dot_product_attention(...)`): it never imports them. Calls through a
model's kernel table (`self.kernels.cross_entropy(...)`, `kernels.layer_norm(...)`) are gpt-core's own
functions unless a caller swaps one in: `test_default_kernels_are_gpt_cores_own` pins the defaults.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src"
SOURCES = sorted(SRC.rglob("*.py"))

OUR_FUNCTIONS = {"softmax", "log_softmax", "cross_entropy", "layer_norm", "gelu", "dropout"}

FORBIDDEN = {
    "torch.nn.functional": re.compile(r"\btorch\s*\.\s*nn\s*\.\s*functional\b"),
    "nn.functional": re.compile(r"\bnn\s*\.\s*functional\b"),
    "F.<name>(": re.compile(r"(?<![\w.])F\s*\.\s*\w+\s*\("),
    "torch.nn layers": re.compile(
        r"\bnn\s*\.\s*(Linear|LazyLinear|Bilinear|LayerNorm|RMSNorm|Embedding|EmbeddingBag|MultiheadAttention"
        r"|Transformer\w*|GELU|Softmax|LogSoftmax|Dropout|CrossEntropyLoss|NLLLoss)\b"
    ),
    "scaled_dot_product_attention": re.compile(r"scaled_dot_product_attention"),
    "torch.<built-in>": re.compile(
        r"\btorch\s*\.\s*(special\s*\.\s*)?(softmax|log_softmax|layer_norm|native_layer_norm|gelu|dropout"
        r"|cross_entropy|nll_loss|embedding|linear|_softmax|_log_softmax)\b"
    ),
    ".softmax( method": re.compile(r"\.\s*softmax\s*\("),
    ".log_softmax( method": re.compile(r"\.\s*log_softmax\s*\("),
    "qualified cross_entropy/layer_norm/gelu/dropout/linear/embedding call": re.compile(
        r"\.\s*(cross_entropy|layer_norm|gelu|dropout|linear|embedding)\s*\("
    ),
}

# In verification.py, and only there, calls on the injected reference namespace are allowed.
_INJECTED_REFERENCE = re.compile(r"(?<![\w.])ref\s*\.\s*\w+")
# Anywhere, calls through a kernel table: gpt_core.Kernels, whose defaults are gpt-core's own functions.
_KERNEL_TABLE = re.compile(r"(?<![\w.])(self\s*\.\s*)?kernels\s*\.\s*\w+")


# Python 3.12+ tokenizes f-strings into pieces; their literal text is dropped like any string.
_DROPPED = {tokenize.COMMENT, tokenize.STRING} | {
    getattr(tokenize, name) for name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)
}


def _code_only(text: str) -> str:
    """The source with comments and string literals blanked out (line structure kept)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _DROPPED:
            continue
        out.append((tok.type, tok.string))
    return tokenize.untokenize(out)


def _violations(path: Path) -> list[str]:
    code = _code_only(path.read_text())
    if path.name == "verification.py":
        code = _INJECTED_REFERENCE.sub("ref_call", code)
    code = _KERNEL_TABLE.sub("kernel_call", code)
    found = []
    for name, pattern in FORBIDDEN.items():
        for match in pattern.finditer(code):
            found.append(f"{path.relative_to(SRC)}: {name}: {match.group(0)!r}")
    return found


def test_the_scan_sees_every_module():
    names = {p.name for p in SOURCES}
    expected = {"model.py", "reference.py", "positions.py", "hooks.py", "kv_cache.py", "generate.py", "gpt2.py"}
    fast = {"attention.py", "layer_norm.py", "gelu.py", "cross_entropy.py", "softmax.py", "linear.py"}
    assert expected | fast | {"verification.py", "__init__.py"} <= names
    assert {p.relative_to(SRC).as_posix() for p in SOURCES} >= {f"gpt_core/kernels/{name}" for name in fast}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_source_uses_no_torch_built_in_layers_or_functional(path):
    assert _violations(path) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_source_imports_nothing_from_torch_nn_functional_or_layers(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("torch.nn.functional"), f"{path.name}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("torch.nn.functional"), f"{path.name}: from {node.module}"
            if node.module in ("torch.nn", "torch"):
                bad = {a.name for a in node.names} & {
                    "functional",
                    "Linear",
                    "LayerNorm",
                    "Embedding",
                    "MultiheadAttention",
                    "Transformer",
                    "GELU",
                    "Dropout",
                }
                assert not bad, f"{path.name}: from {node.module} import {bad}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_bare_calls_to_softmax_and_friends_are_our_own_functions(path):
    """A bare `log_softmax(...)`, `cross_entropy(...)`, ... must be gpt_core's: defined in the same
    module or imported from gpt_core."""
    tree = ast.parse(path.read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported_from_us = {
        (a.asname or a.name)
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "gpt_core"
        for a in n.names
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in OUR_FUNCTIONS:
            assert node.func.id in defined | imported_from_us, f"{path.name}:{node.lineno}: {node.func.id}()"


@pytest.mark.parametrize(
    "snippet",
    [
        "import torch.nn.functional as F\n",
        "y = F.gelu(x)\n",
        "self.fc = nn.Linear(3, 4)\n",
        "ln = nn.LayerNorm(8)\n",
        "e = torch.nn.Embedding(3, 4)\n",
        "a = nn.MultiheadAttention(8, 2)\n",
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
        "p = torch.softmax(x, -1)\n",
        "p = x.softmax(dim=-1)\n",
        "p = logits.log_softmax(-1)\n",
        "y = torch.layer_norm(x, (8,))\n",
        "y = torch.nn.functional.gelu(x)\n",
        "loss = torch.nn.functional.cross_entropy(x, t)\n",
    ],
)
def test_the_scanner_catches_forbidden_snippets(snippet):
    code = _code_only(snippet)
    assert any(pattern.search(code) for pattern in FORBIDDEN.values()), f"scanner missed {snippet!r}"


def test_default_kernels_are_gpt_cores_own():
    """The kernel table's defaults, which the scan lets through, are the hand-written functions."""
    from gpt_core import DEFAULT_KERNELS, REFERENCE_KERNELS, kernels, reference

    assert DEFAULT_KERNELS.sampling_softmax is kernels.softmax.softmax
    assert DEFAULT_KERNELS.attention_weights is kernels.attention.attention_weights
    assert REFERENCE_KERNELS.attention_weights is reference.attention_weights
    for slot in ("attention", "layer_norm", "gelu", "cross_entropy"):
        assert getattr(DEFAULT_KERNELS, slot) is getattr(getattr(kernels, slot), slot), slot
        assert getattr(REFERENCE_KERNELS, slot) is getattr(reference, slot), slot


def test_no_module_asks_which_cpu_it_runs_on():
    """The model computes the same way on every CPU: no route is chosen by reading the processor's vendor."""
    for path in SOURCES:
        text = path.read_text()
        assert "cpuinfo" not in text and "platform.processor" not in text, path.relative_to(SRC)


def test_the_scanner_ignores_docstrings_and_comments():
    code = _code_only('"""pass `torch.nn.functional`: F.gelu(x)"""\n# nn.Linear here\nx = 1\n')
    assert not any(pattern.search(code) for pattern in FORBIDDEN.values())
