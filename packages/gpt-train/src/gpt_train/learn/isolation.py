"""Grade a learner's file in a child process with a time limit: a loop that never ends, an `os._exit` or a thread
left running cannot hang `learn check` or decide its result. The child grades the bytes the parent read and writes
its verdict, with a one-time token, to a file only the two know; no verdict there, with that token, is a failure."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from gpt_train.learn.grader import Verdict, check_file
from gpt_train.learn.loading import describe
from gpt_train.learn.steps import BY_NAME
from gpt_train.learn.task_check import check_task

TIME_LIMIT = 120.0  # seconds, the child's start included
LONGEST_TIME_LIMIT = 86_400.0  # a day

CHILD = "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; " \
        "from gpt_train.learn.isolation import child_main; child_main()"  # fmt: skip
"""The working directory off sys.path (`-c` puts it first): a torch.py there is not imported in torch's place."""


def grade_in_child(step_name: str, path: Path, source: bytes, time_limit: float = TIME_LIMIT) -> Verdict:
    """The verdict on `source` (the bytes of `path`), graded in a child stopped after `time_limit` seconds. Ctrl-C,
    SIGTERM and SIGHUP stop the child too, then end this process as they would have."""
    restore = _catch_termination()
    try:
        return _graded(step_name, path, source, time_limit)
    except Terminated as terminated:  # the child is stopped and the folder removed by now
        restore()
        signal.raise_signal(terminated.args[0])
        raise
    finally:
        restore()


def _graded(step_name: str, path: Path, source: bytes, time_limit: float) -> Verdict:
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="gpt-train-learn-") as folder:
        verdict_path = Path(folder) / "verdict.json"
        header = {"step": step_name, "path": str(path), "verdict": str(verdict_path), "token": token}
        process = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, start_new_session=os.name == "posix"
        )
        try:
            process.communicate(json.dumps(header).encode() + b"\n" + source, timeout=time_limit)
        except subprocess.TimeoutExpired:
            return Verdict(False, f"{path}: the check took longer than {time_limit:g} s and was stopped (a loop "
                                  "that never ends?); `--time-limit` gives it longer", judged=False)  # fmt: skip
        finally:
            _stop(process)
        verdict = _read_verdict(verdict_path, token)
    if verdict is None:
        return Verdict(False, f"{path}: the check ended without a verdict (exit status {process.returncode}): "
                              "something in the file ended the process (os._exit, a signal, a crash)")  # fmt: skip
    return verdict


class Terminated(BaseException):
    """SIGTERM or SIGHUP (its number the argument) arrived during a check; a BaseException, so nothing catches it."""


def _catch_termination() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise Terminated until the returned function is called, so the way out stops the child."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    numbers = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {number: signal.signal(number, _raise_terminated) for number in numbers}

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore


def _raise_terminated(number: int, _frame: object) -> None:
    raise Terminated(number)


def _stop(process: subprocess.Popen) -> None:
    """Kill the child and its process group (on POSIX), and reap it."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except OSError:  # already gone
        pass
    process.wait()


def _read_verdict(path: Path, token: str) -> Verdict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("token") != token:
        return None
    passed, message = data.get("passed"), data.get("message")
    if not isinstance(passed, bool) or not isinstance(message, str):
        return None
    return Verdict(passed, message)


def child_main() -> None:
    """The child: read the header and the source from standard input, grade, write the verdict, end at once."""
    opened, write, close, end = os.open, os.write, os.close, os._exit  # before the learner's code can replace them
    dumps, flush = json.dumps, _flush
    header = json.loads(sys.stdin.buffer.readline())
    source = sys.stdin.buffer.read()
    verdict_path, token = header.pop("verdict"), header.pop("token")
    try:
        step, path = BY_NAME[header["step"]], Path(header["path"])
        verdict = check_task(path, source) if step.kind == "task" else check_file(step, path, source)
        passed, message = verdict.passed is True, str(verdict.message)
    except KeyboardInterrupt:  # no Ctrl-C reaches the child (a session of its own): the learner's code raised it
        passed, message = False, (f"{header['path']}: the code in it raised KeyboardInterrupt (Ctrl-C's exception); "
                                  "a kernel fails by raising an ordinary exception")  # fmt: skip
    except BaseException as error:  # the grader's own failure (or the learner's, escaping it): a failed check
        passed, message = False, f"{header['path']}: the check itself failed ({describe(error)})"
    flush()
    descriptor = opened(verdict_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    write(descriptor, dumps({"token": token, "passed": passed, "message": message}).encode("utf-8"))
    close(descriptor)
    end(0)


def _flush() -> None:
    """What the learner's code printed, out before os._exit skips Python's flushing."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream the learner's code replaced or closed
            stream.flush()
