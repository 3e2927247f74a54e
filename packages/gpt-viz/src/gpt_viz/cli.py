"""The ``gpt-viz`` command: one subcommand per picture, each printing the files it wrote. Bad input ends with one
line ``gpt-viz: error: ...`` on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from pathlib import Path

import click

try:  # matplotlib's import takes a moment: a Ctrl-C in it is the same one line as later
    from matplotlib.backend_bases import FigureCanvasBase
    from matplotlib.figure import Figure

    from gpt_viz.attention import attention_grid
    from gpt_viz.canvas import save_figure
    from gpt_viz.curves import compare_runs, training_curves
    from gpt_viz.errors import VizError
    from gpt_viz.explore import write_explorer
    from gpt_viz.grokking_curves import METRIC, grokking
    from gpt_viz.run_data import load_attention, run_directory
    from gpt_viz.run_layout import RunLayout
    from gpt_viz.run_names import RUN
except KeyboardInterrupt:
    print("gpt-viz: aborted", file=sys.stderr)
    sys.exit(130)

FILE = click.Path(path_type=str)  # kept as typed: a trailing "/" names a directory, which Path would drop
IMAGE_SUFFIXES = FigureCanvasBase.get_supported_filetypes()
SVG_OPTION = click.option("--svg", is_flag=True, help="Also write an SVG next to each picture.")


# click 8.2+ raises it for `gpt-viz` alone, to print the help; 8.1 prints the help itself and raises nothing
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _OneLineError(click.ClickException):
    """What bad input shows, a VizError or a usage error alike: one line `gpt-viz: error: ...`, exit status 2."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        message = self.format_message().replace("\n", " ")
        click.echo(f"gpt-viz: error: {message}", err=True)


class _VizGroup(click.Group):
    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:  # the group's own options: `gpt-viz --bogus`
            return super().make_context(info_name, args, parent=parent, **extra)
        except _NO_ARGS_IS_HELP:
            raise
        except click.UsageError as error:
            raise _OneLineError(error.format_message()) from None

    def invoke(self, ctx: click.Context) -> object:
        main_thread = threading.current_thread() is threading.main_thread()  # elsewhere signals stay as they are
        if main_thread:
            stop = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: no picture left half-written
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning  # matplotlib's (a glyph its font lacks): one line, no source
                return super().invoke(ctx)
        except _NO_ARGS_IS_HELP:
            raise
        except click.UsageError as error:  # a command's arguments: `--layer x`, a missing --metric, no such command
            raise _OneLineError(error.format_message()) from None
        except VizError as error:
            raise _OneLineError(str(error)) from None
        except KeyboardInterrupt:
            click.echo("gpt-viz: aborted", err=True)
            ctx.exit(130)
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, stop)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"gpt-viz: warning: {' '.join(str(message).split())}", err=True)


@click.group(cls=_VizGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpt-viz")
def main() -> None:
    """Pictures of GPT training runs, written as PNG or the format --out's
    suffix names (--out a.pdf), and as SVG too with --svg.

    A run directory holds config.json, metrics.jsonl and optionally
    attention.npz, as written by the trainer.
    """


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=RUN)
@click.option("--metric", help="Held-out metric for the twin axis [default: config's primary_metric].")
@click.option(
    "--out", type=FILE, help="Directory for the pictures, named RUN-curves.png [default: curves.png in each run]."
)
@SVG_OPTION
def curves(run_dirs: tuple[Path, ...], metric: str | None, out: str | None, svg: bool) -> None:
    """Loss, held-out metric and last-layer attention of each run.

    \b
    Example:
      gpt-viz curves addition sort --metric heldout_exact_match   # the newest addition and sort runs
      gpt-viz curves sort                       # a task name: its newest run under ./runs
    """
    if out is None:
        targets = [RunLayout(run_directory(run_dir)).curves_picture for run_dir in run_dirs]
    else:
        if out == "":  # Path("") is the current directory
            raise VizError("--out is empty; name a directory for the pictures")
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise VizError(f"--out {folder} is a file; curves writes its pictures into a directory")
        if not folder.exists() and folder.suffix.lower().lstrip(".") in IMAGE_SUFFIXES:
            raise VizError(
                f"--out {folder} names a picture; curves writes RUN-curves.png for each run into a directory"
            )
        names = [run_directory(run_dir).resolve().name for run_dir in run_dirs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise VizError(f"runs share the name {repeated[0]!r}, so their pictures in {folder} would collide")
        targets = [folder / f"{name}-curves" for name in names]
    for run_dir, target in zip(run_dirs, targets, strict=True):
        _save_and_report(training_curves(run_dir, metric=metric), target, svg)


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=RUN)
@click.option("--metric", required=True, help="'loss' or any metric key, e.g. heldout_accuracy.")
@click.option("--label", "labels", multiple=True, help="Legend label, once per run, in order.")
@click.option("--out", type=FILE, help="Picture path [default: compare-METRIC.png].")
@click.option("--log-y/--linear-y", default=None, help="Y axis scale [default: log for losses].")
@SVG_OPTION
def compare(
    run_dirs: tuple[Path, ...], metric: str, labels: tuple[str, ...], out: str | None, log_y: bool | None, svg: bool
) -> None:
    """Overlay one metric of several runs, as for an ablation.

    \b
    Example:
      gpt-viz compare runs/base runs/no-ln runs/no-res runs/neither \\
          --metric heldout_exact_match --label baseline --label "no LayerNorm" \\
          --label "no residual" --label neither --out ablation.png
    """
    figure = compare_runs(run_dirs, metric, labels=labels or None, log_y=log_y)
    _save_and_report(figure, Path(f"compare-{metric}") if out is None else out, svg)


@main.command()
@click.argument("run_dir", type=RUN)
@click.option("--layer", type=int, help="Layer to show, counted from 0 [default: the last].")
@click.option("--out", type=FILE, help="Picture path [default: RUN_DIR/attention-layerN.png].")
@SVG_OPTION
def attention(run_dir: Path, layer: int | None, out: str | None, svg: bool) -> None:
    """Every attention head of one layer, from attention.npz.

    \b
    Example:
      gpt-viz attention addition --layer 0
      gpt-viz attention sort                    # a task name: its newest run under ./runs
    """
    snapshot = load_attention(run_dir)
    n_layer = snapshot.weights.shape[0]
    layer = n_layer - 1 if layer is None else layer
    if not 0 <= layer < n_layer:
        raise VizError(f"layer {layer} is out of range; {RunLayout.ATTENTION} has layers 0 to {n_layer - 1}")
    figure = attention_grid(snapshot.weights[layer], snapshot.tokens, layer=layer, prompt_length=snapshot.prompt_length)
    _save_and_report(figure, run_dir / f"attention-layer{layer}" if out is None else out, svg)


@main.command("grokking")
@click.argument("run_dir", type=RUN)
@click.option(
    "--metric",
    default=METRIC,
    show_default=True,
    help="Task metric without its split; plots train_METRIC and heldout_METRIC.",
)
@click.option("--loss", help="Task loss without its split (loss): adds a panel of train_LOSS and heldout_LOSS.")
@click.option("--progress", help="A metric key (heldout_probe_fourier_top5_share): adds its curve under the accuracy.")
@click.option("--out", type=FILE, help="Picture path [default: RUN_DIR/grokking.png].")
@SVG_OPTION
def grokking_command(
    run_dir: Path, metric: str, loss: str | None, progress: str | None, out: str | None, svg: bool
) -> None:
    """Train and held-out accuracy (or --metric), marking where each reaches 0.99, on a log step axis.

    \b
    Example:
      gpt-viz grokking modadd --out grokking.png
      gpt-viz grokking modadd --loss loss --progress heldout_probe_fourier_top5_share
    """
    figure = grokking(run_dir, metric=metric, loss=loss, progress=progress)
    _save_and_report(figure, RunLayout(run_dir).grokking_picture if out is None else out, svg)


@main.command()
@click.argument("run_dir", type=RUN)
@click.option("--out", type=FILE, help="Page path, .html added to another suffix [default: RUN_DIR/explore.html].")
def explore(run_dir: Path, out: str | None) -> None:
    """One self-contained HTML page to explore a run in a browser.

    The run's curves, the attention of every layer and head (choose the
    example, layer and head; hover a token to highlight its row and column)
    and, when `gpt-train inspect RUN heads` has run, the head-ablation heatmap.
    Scripts and data are inline: the page opens offline and fetches nothing.

    \b
    Example:
      gpt-viz explore sort                      # writes explore.html into the newest sort run
    """
    click.echo(str(write_explorer(run_dir, out)))


def _save_and_report(figure: Figure, target: str | Path, svg: bool) -> None:
    """PNG, or the image format `--out`'s suffix names (a.jpg writes a.jpg); `--svg` adds an SVG beside it."""
    named = Path(target).suffix.lower().lstrip(".")
    first = named if named in figure.canvas.get_supported_filetypes() else "png"
    for fmt in dict.fromkeys((first, "svg") if svg else (first,)):  # each named as written, before the next fails
        for path in save_figure(figure, target, formats=(fmt,)):
            click.echo(str(path))
