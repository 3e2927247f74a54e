"""Kernel plugins: listing, choosing (--kernel SLOT=NAME), verification that catches wrong kernels, runs
that record their kernels and refuse, in one line, to go on without them, and contained plugin failures."""

from __future__ import annotations

import inspect
import itertools
import json
import shutil
import sys
import textwrap
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest
import torch
from kernel_examples import CALLS
from train_helpers import TINY, assert_one_line_error, ctrl_c_in_the_final_evaluation

import gpt_train
from gpt_core import KERNEL_SLOTS, plugins
from gpt_train import kernels as kernels_module
from gpt_train.kernels import (
    ENTRY_POINT_GROUP,
    KernelError,
    KernelInfo,
    KernelPluginWarning,
    KernelRegistry,
    parse_kernel_choices,
)
from gpt_viz import RunLayout

RIGHT = "attention=kernel_examples:attention"

# Each deliberate mistake (kernel_examples.py) and what the failure line must point at.
MISTAKES = {
    "scale 1/d": ("attention=kernel_examples:scale_over_d", "sdpa causal: output ["),
    "mask shifted by one": ("attention=kernel_examples:mask_shifted_by_one", "sdpa causal: output ["),
    "unbiased variance": ("layer_norm=kernel_examples:unbiased_layer_norm", "LayerNorm: output ["),
    "backward drops a term": (
        "layer_norm=kernel_examples:layer_norm_backward_drops_a_term",
        "LayerNorm: gradient of x [",
    ),
}


@pytest.fixture
def plugin(tmp_path):
    """plugin(module, source) -> an EntryPoint for a module written into tmp_path."""
    with plugins.plugin_modules(tmp_path, ENTRY_POINT_GROUP) as make:
        yield make


PLUGIN = """
from gpt_core.plugins import hookimpl
from gpt_core import DEFAULT_KERNELS


def {name}(*args):
    '''{name}: gpt-core's own {slot}, by another name.'''
    return getattr(DEFAULT_KERNELS, {slot!r})(*args)


@hookimpl
def register_kernels(register):
    {body}
"""


def kernel_plugin(plugin, module: str, slot: str = "gelu", name: str = "mine", body: str | None = None) -> EntryPoint:
    register = body or f"register({slot!r}, {name!r}, {name})"
    return plugin(module, PLUGIN.format(name=name, slot=slot, body=register))


@pytest.fixture
def installed(monkeypatch):
    """installed(*entry_points): the process's kernel plugins are exactly these, for the test's duration."""

    def install(*fakes: EntryPoint) -> None:
        def installed_entry_points(group: str) -> list[EntryPoint]:
            return list(fakes) if group == ENTRY_POINT_GROUP else list(entry_points(group=group))

        monkeypatch.setattr(plugins, "entry_points", installed_entry_points)
        kernels_module.default_kernel_registry.cache_clear()

    yield install
    kernels_module.default_kernel_registry.cache_clear()


def field_of(line: str, column: int) -> str:
    return line.split()[column]


# listing ---------------------------------------------------------------------------------------
def test_kernels_lists_every_slot_with_its_signature_and_gpt_cores_own(cli):
    result = cli("kernels")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["SLOT", "SIGNATURE"]
    assert [field_of(line, 0) for line in lines[1 : 1 + len(KERNEL_SLOTS)]] == list(KERNEL_SLOTS)
    providers = lines[lines.index("") + 1 :]
    assert providers[0].split()[:5] == ["SLOT", "KERNEL", "PLUGIN", "DISTRIBUTION", "VERSION"]
    own = [line.split()[:4] for line in providers if field_of(line, 1) == "gpt-core"]
    assert own == [[slot, "gpt-core", "builtin", "gpt-core"] for slot in KERNEL_SLOTS]


def test_kernels_json_lists_a_plugins_kernel_with_its_plugin(cli, plugin, installed):
    installed(kernel_plugin(plugin, "kp_gelu"))
    listed = json.loads(cli("kernels", "--json").out)
    assert set(listed["slots"]) == set(KERNEL_SLOTS)
    mine = [k for k in listed["kernels"] if k["name"] == "mine"]
    assert mine == [
        {
            "slot": "gelu",
            "name": "mine",
            "plugin": "kp_gelu",
            "distribution": "unknown",
            "version": "unknown",
            "description": "mine: gpt-core's own gelu, by another name.",
        }
    ]


def test_each_kernels_description_is_its_docstrings_first_paragraph_whole(cli):
    """A first line ending mid-sentence ("...q (B, H, Tq, d),") was listed as the description."""
    own = [k for k in json.loads(cli("kernels", "--json").out)["kernels"] if k["plugin"] == "builtin"]
    assert len(own) == len(KERNEL_SLOTS) and all(k["description"].endswith(".") for k in own), own

    def gelu(x):
        """My fast GELU,
        tanh's.
        \x20\x20\x20\x20
        Long notes on how."""

    assert KernelInfo("gelu", "mine", gelu, "p", "d", "1").description == "My fast GELU, tanh's."


# plugin failures stay contained ------------------------------------------------------------------
def test_a_plugin_that_fails_to_import_is_a_warning_and_the_others_work(plugin):
    broken = plugin("kp_broken", "raise ImportError('no such thing')\n")
    with pytest.warns(KernelPluginWarning, match="kernel plugin 'kp_broken' .* failed to load: ImportError"):
        registry = KernelRegistry([broken, kernel_plugin(plugin, "kp_fine")])
    assert registry.info("gelu", "mine").plugin == "kp_fine"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise RuntimeError('boom')", "RuntimeError: boom"),
        ("register('gelu', 'half', mine); register('attnetion', 'x', mine)", "slot among attention"),
        ("register('gelu', 'a:b', mine)", "a kernel name has no ':'"),
        ("register('gelu', 'tab\\tname', mine)", "or whitespace"),  # it misaligned the kernels table
        ("register('gelu', 'mine', 42)", "takes a callable kernel"),
    ],
    ids=["raises", "unknown slot", "bad name", "tab in name", "not callable"],
)
def test_a_plugin_that_fails_to_register_is_a_warning_and_registers_nothing(plugin, body, said):
    bad = kernel_plugin(plugin, "kp_bad", body=body)
    with pytest.warns(KernelPluginWarning, match=f"'kp_bad' .* failed to register its kernels: .*{said}"):
        registry = KernelRegistry([bad, kernel_plugin(plugin, "kp_good", slot="sampling_softmax")])
    assert [(k.slot, k.name) for k in registry.kernels() if k.plugin == "kp_bad"] == []
    assert registry.info("sampling_softmax", "mine").plugin == "kp_good"


def test_two_plugins_claiming_one_name_make_it_an_error_naming_both(plugin):
    with pytest.warns(KernelPluginWarning, match="kernel gelu=mine is registered by both"):
        registry = KernelRegistry([kernel_plugin(plugin, "kp_one"), kernel_plugin(plugin, "kp_two")])
    with pytest.raises(KernelError, match="plugin 'kp_one' .* and plugin 'kp_two'"):
        registry.info("gelu", "mine")
    assert registry.info("gelu", "gpt-core").distribution == "gpt-core"


def test_a_broken_kernel_plugin_leaves_tasks_and_other_kernels_working(cli, plugin, installed, tmp_path):
    installed(plugin("kp_broken", "raise ImportError('no such thing')\n"), kernel_plugin(plugin, "kp_fine"))
    listed = cli("kernels")
    assert listed.code == 0
    assert "gpt-train: warning: kernel plugin 'kp_broken'" in listed.err
    assert any(line.split()[:2] == ["gelu", "mine"] for line in listed.out.splitlines())
    assert cli("tasks").code == 0
    run_dir = tmp_path / "with-plugin-kernel"
    result = cli(*TINY, "--steps", "2", "--kernel", "gelu=mine", "--out", run_dir)
    assert result.code == 0, result.err
    assert json.loads((run_dir / RunLayout.CONFIG).read_text())["kernels"] == {"gelu": "mine"}


# choosing ----------------------------------------------------------------------------------------
def test_kernel_choices_are_parsed_and_checked():
    assert parse_kernel_choices(["attention=flash", "gelu = m:f"]) == {"attention": "flash", "gelu": "m:f"}
    assert parse_kernel_choices(["attention=gpt-core"]) == {}  # gpt-core's own: nothing swapped
    for pairs, said in [
        (["attention"], "--kernel expects SLOT=NAME"),
        (["attn=flash"], "unknown kernel slot 'attn'; slots: attention, attention_weights, sampling_softmax"),
        (["gelu=a:b", "gelu=c:d"], "names slot gelu twice"),
    ]:
        with pytest.raises(KernelError, match=said):
            parse_kernel_choices(pairs)


# verification ------------------------------------------------------------------------------------
def test_verify_passes_a_right_kernel(cli):
    result = cli("verify", "--seed", "0", "--kernel", RIGHT)
    assert result.code == 0, result.err
    assert result.out.startswith(f"kernel {RIGHT}\n")
    assert f"kernel {RIGHT}: all 15 checks within 1e-12" in result.out
    assert f"kernel {RIGHT} in float32: all 15 checks within 1e-04 in float32" in result.out
    assert f"kernel {RIGHT}: second derivatives: all 2 checks within 1e-12" in result.out  # plain autograd answers
    assert f"kernel {RIGHT} in float32: second derivatives: all 2 checks within 1e-04 in float32" in result.out


def test_verify_passes_a_kernel_that_refuses_second_derivatives_saying_so(cli):
    choice = "layer_norm=gpt_core.kernels.layer_norm:layer_norm"  # gpt-core's own, marked `differentiates_once`
    result = cli("verify", "--seed", "0", "--kernel", choice)
    assert result.code == 0, result.err
    assert f"kernel {choice}: second derivatives: 1 refused (it raises)" in result.out
    assert "LayerNorm: RuntimeError: gpt_core.kernels.layer_norm's backward differentiates once" in result.out


SECOND_WRONG = "layer_norm=kernel_examples:layer_norm_wrong_second_derivative"


def test_verify_fails_a_kernel_whose_second_derivative_is_silently_wrong_and_run_still_trains_with_it(cli, tmp_path):
    result = cli("verify", "--seed", "0", "--kernel", SECOND_WRONG)
    said = f"kernel {SECOND_WRONG}: second derivatives: LayerNorm: d<grad, u>/d"
    assert_one_line_error(result, said, "differs from F.layer_norm", "exceeds the tolerance 1e-12", code=1)
    assert f"kernel {SECOND_WRONG}: all 6 checks within 1e-12" in result.out  # its first derivatives are right
    assert f"kernel {SECOND_WRONG} in float32: all 6 checks within 1e-04" in result.out
    result = cli(*TINY, "--steps", "2", "--kernel", SECOND_WRONG, "--out", tmp_path / "run")
    assert result.code == 0, result.err  # training takes first derivatives only


FLOAT64_ONLY = "gelu=kernel_examples:gelu_right_in_float64_only"


def test_a_kernel_right_in_float64_only_fails_verify_and_the_run_in_float32(cli, tmp_path):
    result = cli("verify", "--seed", "0", "--kernel", FLOAT64_ONLY)
    assert_one_line_error(result, f"kernel {FLOAT64_ONLY} in float32: GELU (tanh): output [", code=1)
    assert f"kernel {FLOAT64_ONLY}: all 6 checks within 1e-12" in result.out  # float64 alone passes it
    result = cli(*TINY, "--kernel", FLOAT64_ONLY, "--out", tmp_path / "run")
    assert_one_line_error(result, f"kernel {FLOAT64_ONLY} fails verification, in float32: GELU (tanh): output [")
    assert not (tmp_path / "run").exists()


WRONG_IN_16_BITS = "attention=kernel_examples:attention_wrong_in_16_bits"


def test_a_kernel_wrong_in_16_bits_only_is_refused_by_a_bf16_run_and_passes_a_float32_one(cli, tmp_path):
    """A `--set dtype=bf16` run's kernels were checked in float64 and float32 only: one wrong on 16-bit inputs
    trained without a word, though `verify --dtype bf16` fails it. A run checks them in its own dtype too."""
    result = cli(*TINY, "--kernel", WRONG_IN_16_BITS, "--set", "dtype=bf16", "--out", tmp_path / "bf16")
    said = f"kernel {WRONG_IN_16_BITS} fails verification, in bfloat16: sdpa causal: output ["
    assert_one_line_error(result, said, "of the reference's scale", f"`gpt-train verify --kernel {WRONG_IN_16_BITS} "
                          "--dtype bf16`")  # fmt: skip
    assert not (tmp_path / "bf16").exists()
    slot, name = WRONG_IN_16_BITS.split("=")
    kernel = kernels_module.resolve_kernel(slot, name)
    assert kernels_module.kernel_failure(slot, kernel, 0) is None  # a float32 run's checks pass it
    assert kernels_module.kernel_failure(slot, kernel, 0, "fp16").startswith("in float16: sdpa causal: output [")
    assert cli(*TINY, "--steps", "2", "--kernel", RIGHT, "--set", "dtype=bf16", "--out", tmp_path / "ok").code == 0


def test_a_16_bit_run_checks_in_16_bits_only_the_slots_autocast_computes_in_16_bits():
    """LayerNorm (float32 under autocast) and the sampling softmax (float32 logits) were checked in 16 bits too, inside
    a whole GPT cast to fp16, which no run computes: a right LayerNorm written with rsqrt was refused on every seed."""
    checks = kernels_module.kernel_checks
    for slot in ("layer_norm", "sampling_softmax"):
        assert checks("bf16", slot) == checks("fp16", slot) == kernels_module.KERNEL_CHECKS
    for slot in ("attention", "attention_weights", "gelu", "cross_entropy", "dropout"):
        assert [label for _, _, label in checks("bf16", slot)] == ["", " in float32", " in bfloat16"]


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_verify_fails_each_wrong_kernel_pointing_at_the_mistake(cli, mistake):
    choice, said = MISTAKES[mistake]
    result = cli("verify", "--seed", "0", "--kernel", choice)
    exceeds = "which exceeds the tolerance 1e-12"
    assert_one_line_error(result, f"kernel {choice}: {said}", "differs from F.", exceeds, code=1)
    rows = {line[:45].strip(): line[45:].split() for line in result.out.splitlines()[3:] if line.strip()}
    if mistake == "mask shifted by one":  # the mask alone: causal cases fail, the unmasked ones agree
        assert float(rows["sdpa non-causal"][1]) <= 1e-12
        assert float(rows["sdpa causal, queries offset by 4"][1]) > 1e-3
    if mistake == "backward drops a term":  # the forward is right: only the gradient differs
        assert all(float(cells[-2]) <= 1e-12 for cells in rows.values())


@pytest.mark.parametrize(
    ("choice", "said"),
    [
        ("attention=nope", "no kernel 'nope' for attention is installed (installed: "),
        ("attention=kernel_gone:attention", "cannot load it (ModuleNotFoundError: No module named 'kernel_gone')"),
        ("attention=kernel_examples:missing", "cannot load it (AttributeError"),
        ("attention=kernel_examples:not_a_function", "is not a function (it is 42)"),
        ("attention=gpt-core", "plain `gpt-train verify`"),
    ],
)
def test_verify_refuses_a_kernel_it_cannot_find_in_one_line(cli, choice, said):
    assert_one_line_error(cli("verify", "--kernel", choice), said)


# runs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_run_refuses_each_wrong_kernel_and_writes_nothing(cli, tmp_path, mistake):
    choice, said = MISTAKES[mistake]
    run_dir = tmp_path / "refused"
    result = cli(*TINY, "--kernel", choice, "--out", run_dir)
    assert_one_line_error(result, f"kernel {choice} fails verification, {said}", "--unverified")
    assert not run_dir.exists()


def test_unverified_trains_with_a_wrong_kernel_and_records_it(cli, tmp_path):
    run_dir = tmp_path / "unverified"
    choice = MISTAKES["scale 1/d"][0]
    result = cli(*TINY, "--steps", "2", "--kernel", choice, "--unverified", "--out", run_dir)
    assert result.code == 0, result.err
    warned = "gpt-train: warning: kernel attention=kernel_examples:scale_over_d fails verification, sdpa causal: "
    assert result.err.startswith(warned) and result.err.rstrip().endswith("training with it anyway (--unverified)")
    config = json.loads((run_dir / RunLayout.CONFIG).read_text())
    assert config["kernels"] == {"attention": "kernel_examples:scale_over_d"}
    assert config["unverified_kernels"] == ["attention"]


def test_the_commands_a_module_kernel_run_prints_carry_trust_kernels_and_work_when_pasted(cli, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with ctrl_c_in_the_final_evaluation(monkeypatch):
        stopped = cli(*TINY, "--kernel", RIGHT, "--out", run_dir)
    assert_one_line_error(stopped, f"Resume with: gpt-train run --resume {run_dir} --trust-kernels", code=130)
    assert cli("run", "--resume", run_dir, "--quiet", "--trust-kernels").code == 0
    exported = cli("export", run_dir, tmp_path / "hf")
    assert exported.code == 0, exported.err
    assert exported.out.strip().endswith(f"sample with `gpt-train sample {run_dir} --trust-kernels`")


def test_a_run_records_its_kernels_and_eval_sample_and_resume_compute_with_them(cli, tmp_path):
    run_dir = tmp_path / "swapped"
    assert cli(*TINY, "--kernel", RIGHT, "--out", run_dir).code == 0
    path = run_dir / RunLayout.CONFIG
    config = json.loads(path.read_text())
    assert (config["kernels"], config["unverified_kernels"]) == ({"attention": "kernel_examples:attention"}, [])
    for command in (["eval", run_dir, "--limit", "50"], ["sample", run_dir, "--prompt", "3142"]):
        CALLS.clear()
        assert cli(*command, "--device", "cpu", "--trust-kernels").code == 0
        assert CALLS["attention"] > 0, command
    path.write_text(json.dumps(config | {"train": config["train"] | {"steps": 40}}))  # 10 more steps to resume
    CALLS.clear()
    assert cli("run", "--resume", run_dir, "--device", "cpu", "--quiet", "--trust-kernels").code == 0
    assert CALLS["attention"] >= 10


def test_a_run_whose_kernel_is_gone_is_refused_in_one_line(cli, tmp_path):
    run_dir = tmp_path / "gone"
    assert cli(*TINY, "--steps", "10", "--kernel", RIGHT, "--out", run_dir).code == 0
    path = run_dir / RunLayout.CONFIG
    config = json.loads(path.read_text())
    path.write_text(json.dumps(config | {"kernels": {"attention": "flash_uninstalled"}}))
    said = f"{run_dir} was trained with kernels attention=flash_uninstalled; no kernel 'flash_uninstalled'"
    for command in (["eval", run_dir], ["sample", run_dir], ["run", "--resume", run_dir]):
        assert_one_line_error(cli(*command, "--device", "cpu"), said)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--unverified"], "--unverified applies to --kernel choices; there are none"),
        (["--kernel", RIGHT, "--set", "dropout=0.1"], "dropout 0.1 needs gpt-core's own attention kernel"),
        (["--kernel", "attention=nope"], "no kernel 'nope' for attention is installed"),
    ],
)
def test_run_refuses_bad_kernel_choices_in_one_line(cli, tmp_path, extra, said):
    run_dir = tmp_path / "bad"
    assert_one_line_error(cli(*TINY, *extra, "--out", run_dir), said)
    assert not run_dir.exists()


def test_resume_takes_no_kernel_choices(cli, tiny_run):
    assert_one_line_error(cli("run", "--resume", tiny_run, "--kernel", RIGHT), "drop --kernel")


# opening a run trained with module-path kernels ---------------------------------------------------
_fresh = itertools.count()


@pytest.fixture
def fresh_module(monkeypatch):
    """fresh_module(folder, source) -> its name: a module written into `folder` under a name not imported yet in
    this process (a module stays imported), forgotten again after the test."""
    written = []

    def write(folder: Path, source: str, name: str | None = None) -> str:
        name = name or f"saved_kernel_{next(_fresh)}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


MARKS_ON_IMPORT = """
    import pathlib
    pathlib.Path("MARKER").write_text("imported")
    attention = None
"""
RIGHT_ATTENTION = """
    from gpt_core import DEFAULT_KERNELS
    CALLS = []
    def attention(q, k, v, causal):
        CALLS.append(1)
        return DEFAULT_KERNELS.attention(q, k, v, causal)
"""
UNIFORM_ATTENTION = """
    def attention(q, k, v, causal):
        return v.mean(-2, keepdim=True).expand_as(v).clone()
"""
RAISING_ATTENTION = """
    def attention(q, k, v, causal):
        raise NotImplementedError("rewriting it")
"""
OPENING_COMMANDS = [
    ["eval", "{run}", "--limit", "20"],
    ["sample", "{run}", "--prompt", "3142"],
    ["inspect", "{run}", "heads", "--examples", "20"],
    ["serve", "{run}", "--port", "0"],
]


def opening(command: list[str], run_dir: Path) -> list[str]:
    return [str(run_dir) if part == "{run}" else part for part in command] + ["--device", "cpu"]


def test_opening_a_run_naming_a_module_kernel_imports_nothing_without_trust_kernels(
    cli, tiny_run, tmp_path, monkeypatch, fresh_module
):
    monkeypatch.chdir(tmp_path)
    module = fresh_module(tmp_path, MARKS_ON_IMPORT)  # what an archive unpacked beside the run could hold
    path = tiny_run / RunLayout.CONFIG
    path.write_text(json.dumps(json.loads(path.read_text()) | {"kernels": {"attention": f"{module}:attention"}}))
    for command in OPENING_COMMANDS:
        said = f"{tiny_run} was trained with module-path kernels attention={module}:attention"
        assert_one_line_error(cli(*opening(command, tiny_run)), said, "--trust-kernels")
    with pytest.raises(KernelError, match="trust_kernels=True"):
        gpt_train.load_run(tiny_run)
    assert not (tmp_path / "MARKER").exists()
    assert module not in sys.modules


def test_a_trusted_module_kernel_comes_from_the_folder_the_run_recorded_never_the_working_directory(
    cli, tmp_path, monkeypatch, fresh_module
):
    author, elsewhere, run_dir = tmp_path / "author", tmp_path / "elsewhere", tmp_path / "run"
    module = fresh_module(author, RIGHT_ATTENTION)
    monkeypatch.chdir(author)  # `run --kernel` finds a module in the working directory
    assert cli(*TINY, "--steps", "10", "--kernel", f"attention={module}:attention", "--out", run_dir).code == 0
    assert json.loads((run_dir / RunLayout.CONFIG).read_text())["kernel_folders"] == {"attention": "../author"}
    fresh_module(elsewhere, MARKS_ON_IMPORT, name=module)  # the same name, in the folder the run is opened from
    monkeypatch.chdir(elsewhere)
    monkeypatch.syspath_prepend(str(elsewhere))  # as `python -m gpt_train` puts it first
    for command in OPENING_COMMANDS[:3]:
        sys.modules.pop(module, None)
        result = cli(*opening(command, run_dir), "--trust-kernels")
        assert result.code == 0, result.err
        assert sys.modules[module].CALLS, command  # the author's module, verified and computed with
    loaded = gpt_train.load_run(run_dir, trust_kernels=True)
    assert loaded.model.config.n_layer == 1
    assert not (elsewhere / "MARKER").exists()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (UNIFORM_ATTENTION, "fails verification, sdpa causal: output ["),
        (RAISING_ATTENTION, "the forward raised NotImplementedError: rewriting it"),
    ],
    ids=["computes otherwise", "raises"],
)
def test_a_trusted_module_kernel_edited_since_training_is_refused_in_one_line(
    cli, tmp_path, monkeypatch, fresh_module, edit, said
):
    run_dir = tmp_path / "run"
    module = fresh_module(tmp_path, RIGHT_ATTENTION)
    monkeypatch.chdir(tmp_path)
    assert cli(*TINY, "--steps", "10", "--kernel", f"attention={module}:attention", "--out", run_dir).code == 0
    fresh_module(tmp_path, edit, name=module)  # a learner rewriting the kernel after training
    for command in OPENING_COMMANDS:
        sys.modules.pop(module, None)
        result = cli(*opening(command, run_dir), "--trust-kernels")
        assert_one_line_error(result, f"{run_dir} was trained with kernels attention={module}:attention", said)


MARKED_GELU = """
    from gpt_core import DEFAULT_KERNELS
    MARK = {mark!r}
    CALLS = []
    def gelu(x):
        CALLS.append(MARK)
        return DEFAULT_KERNELS.gelu(x)
"""


def test_two_runs_whose_folders_hold_modules_of_one_name_each_compute_with_their_own(tiny_run, tmp_path, fresh_module):
    """One process opening two runs whose recorded folders each hold a `mymod.py` got the first one's module for
    both: importlib hands back the module already imported. Each run computes with its own folder's, and the first
    stays the one imported under that name."""
    runs, module = {}, None
    for mark in "AC":
        module = fresh_module(tmp_path / mark, MARKED_GELU.format(mark=mark), name=module)
        runs[mark] = tmp_path / f"run{mark}"
        shutil.copytree(tiny_run, runs[mark])
        path = runs[mark] / RunLayout.CONFIG
        recorded = {"kernels": {"gelu": f"{module}:gelu"}, "kernel_folders": {"gelu": f"../{mark}"}}
        path.write_text(json.dumps(json.loads(path.read_text()) | recorded))
    for mark in "ACA":
        loaded = gpt_train.load_run(runs[mark], trust_kernels=True)
        own = inspect.unwrap(loaded.model.kernels.gelu).__globals__
        assert own["MARK"] == mark and Path(own["__file__"]).resolve().parent == tmp_path / mark
        before = len(own["CALLS"])
        loaded.model(torch.zeros(1, 3, dtype=torch.long))
        assert own["CALLS"][before:] == [mark]  # the one layer's MLP, computed with this run's module
    assert sys.modules[module].MARK == "A"


BATCH_LIMITED_ATTENTION = """
    from gpt_core import DEFAULT_KERNELS
    def attention(q, k, v, causal):
        if q.shape[0] > 8:  # passes the check at open, fails on an evaluation's batch
            raise RuntimeError("batch too large for my tile buffer")
        return DEFAULT_KERNELS.attention(q, k, v, causal)
"""


def test_a_trusted_module_kernel_that_fails_after_its_check_is_one_line_naming_it(
    cli, tmp_path, monkeypatch, fresh_module
):
    run_dir = tmp_path / "run"
    module = fresh_module(tmp_path, RIGHT_ATTENTION)
    monkeypatch.chdir(tmp_path)
    assert cli(*TINY, "--steps", "10", "--kernel", f"attention={module}:attention", "--out", run_dir).code == 0
    fresh_module(tmp_path, BATCH_LIMITED_ATTENTION, name=module)
    said = f"gpt-train: error: kernel attention={module}:attention failed: RuntimeError: batch too large"
    for command in (OPENING_COMMANDS[0], OPENING_COMMANDS[2]):
        sys.modules.pop(module, None)
        result = cli(*opening(command, run_dir), "--trust-kernels")
        assert result.code == 2 and "Traceback" not in result.err, result.err
        assert result.err.split("\r")[-1].strip().startswith(said), result.err  # after inspect's progress bar


def test_a_moved_run_whose_kernel_is_not_found_names_the_folder_it_looked_in(cli, tmp_path, monkeypatch, fresh_module):
    work = tmp_path / "work"
    module = fresh_module(work, RIGHT_ATTENTION)
    monkeypatch.chdir(work)
    assert cli(*TINY, "--steps", "2", "--kernel", f"attention={module}:attention", "--out", "runs/run").code == 0
    moved = tmp_path / "elsewhere" / "deep" / "run"  # the module's folder is recorded relative to the run
    moved.parent.mkdir(parents=True)
    (work / "runs" / "run").rename(moved)
    sys.modules.pop(module, None)
    result = cli("sample", moved, "--prompt", "3141", "--trust-kernels")
    looked = f"cannot load it from {tmp_path / 'elsewhere'}, the folder the run recorded (ModuleNotFoundError"
    assert_one_line_error(result, looked)


def test_resuming_a_run_naming_a_module_kernel_imports_nothing_without_trust_kernels(
    cli, tiny_run, tmp_path, monkeypatch, fresh_module
):
    monkeypatch.chdir(tmp_path)
    module = fresh_module(tmp_path, MARKS_ON_IMPORT)  # beside the run, in the working directory
    path = tiny_run / RunLayout.CONFIG
    config = json.loads(path.read_text())
    kernels = {"attention": f"{module}:attention"}
    path.write_text(json.dumps(config | {"kernels": kernels, "train": config["train"] | {"steps": 40}}))
    said = f"{tiny_run} was trained with module-path kernels attention={module}:attention"
    resume = ("run", "--resume", tiny_run, "--device", "cpu", "--quiet")
    assert_one_line_error(cli(*resume), said, "--trust-kernels")
    result = cli(*resume, "--trust-kernels")  # never from the working directory
    assert_one_line_error(result, f"attention={module}:attention: cannot load it (ModuleNotFoundError")
    assert not (tmp_path / "MARKER").exists() and module not in sys.modules
    assert str(tmp_path) not in sys.path


def test_a_resumed_run_takes_its_module_kernel_from_the_folder_it_recorded_never_the_working_directory(
    cli, tmp_path, monkeypatch, fresh_module
):
    author, elsewhere, run_dir = tmp_path / "author", tmp_path / "elsewhere", tmp_path / "run"
    module = fresh_module(author, RIGHT_ATTENTION)
    monkeypatch.chdir(author)
    assert cli(*TINY, "--steps", "10", "--kernel", f"attention={module}:attention", "--out", run_dir).code == 0
    path = run_dir / RunLayout.CONFIG
    config = json.loads(path.read_text())
    path.write_text(json.dumps(config | {"train": config["train"] | {"steps": 20}}))
    fresh_module(elsewhere, MARKS_ON_IMPORT, name=module)  # the same name, where the run is resumed from
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(module, None)
    result = cli("run", "--resume", run_dir, "--device", "cpu", "--quiet", "--trust-kernels")
    assert result.code == 0, result.err
    assert len(sys.modules[module].CALLS) >= 10  # the author's module trained the resumed steps
    assert not (elsewhere / "MARKER").exists() and str(elsewhere) not in sys.path


def test_trust_kernels_is_for_resuming(cli, tmp_path):
    assert_one_line_error(
        cli(*TINY, "--out", tmp_path / "run", "--trust-kernels"), "--trust-kernels applies to --resume"
    )
    assert not (tmp_path / "run").exists()


def test_a_run_on_an_installed_plugins_kernel_opens_without_trust_kernels(cli, plugin, installed, tmp_path):
    installed(kernel_plugin(plugin, "kp_opened"))
    run_dir = tmp_path / "with-plugin-kernel"
    assert cli(*TINY, "--steps", "10", "--kernel", "gelu=mine", "--out", run_dir).code == 0
    for command in OPENING_COMMANDS[:3]:
        result = cli(*opening(command, run_dir))
        assert result.code == 0, result.err


def test_an_installed_kernel_changed_since_training_is_refused_where_the_run_is_opened(
    cli, plugin, installed, tmp_path
):
    """An upgraded or edited plugin's kernel gave eval, sample and inspect other numbers without a word."""
    installed(kernel_plugin(plugin, "kp_before"))
    run_dir = tmp_path / "with-plugin-kernel"
    assert cli(*TINY, "--steps", "10", "--kernel", "gelu=mine", "--out", run_dir).code == 0
    changed = PLUGIN.format(name="mine", slot="gelu", body="register('gelu', 'mine', mine)").replace(
        "return getattr(DEFAULT_KERNELS, 'gelu')(*args)", "return getattr(DEFAULT_KERNELS, 'gelu')(*args) * 0.5"
    )
    installed(plugin("kp_after", changed))
    for command in OPENING_COMMANDS[:3]:
        refused = cli(*opening(command, run_dir))
        assert_one_line_error(refused, "kernel gelu=mine fails verification", "edited since?")
