"""`gpt-train serve RUN`: the explorer on the learner's own prompt. The page (serve_page.html) asks for the run's
summary (/api/run) and the model on a prompt (/api/prompt?text=...); no file is read on request. The stdlib's
threading server adds no dependency; one lock lets one request at a time use the model (its hooks are per model)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import click
import torch

from gpt_core import GPT
from gpt_train.cli.options import TRUST_KERNELS_OPTION
from gpt_train.devices import resolve_device
from gpt_train.errors import TrainError
from gpt_train.lab import records as record_checks
from gpt_train.lab.explain import explain_prompt
from gpt_train.lab.findings import all_findings
from gpt_train.loading import load_run
from gpt_train.prompts import PromptError, Vocabulary
from gpt_train.signals import ctrl_c_interrupts
from gpt_viz import RunLayout, VizError
from gpt_viz.explore import filled_page
from gpt_viz.inspect_pictures import load_inspection, most_needed_head
from gpt_viz.run_names import RUN

PAGE = "serve_page.html"
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8765
CONNECTION_TIMEOUT = 30.0  # seconds a connection may wait for the client's next bytes before it is closed
MAX_CONNECTIONS = 64  # served at once; one more is answered 503, so idle clients cannot pile up threads
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def saved_records(layout: RunLayout, model: GPT, step: int) -> tuple[dict[str, Any], list[str]]:
    """The run's inspect records that `records` finds usable for this model at checkpoint `step`, and the names of
    those left out (a record of an earlier checkpoint, as a run that trained on after `inspect` leaves, among them)."""
    records: dict[str, Any] = {"patching": {}}
    left_out = []
    checks = [
        ("heads", layout.heads_ablation, record_checks.heads),
        ("logit_lens", layout.logit_lens, record_checks.logit_lens),
        ("reads", layout.reads, record_checks.reads),
    ]
    patched = sorted(layout.root.glob(f"{RunLayout.PATCHING_PREFIX}*.json"))
    for key, path, check in checks + [("patching", path, record_checks.patching) for path in patched]:
        if not path.is_file():
            continue
        try:
            saved = load_inspection(path)
            record = check(saved, model.config)
        except (VizError, record_checks.Unusable, KeyError):  # unreadable, or a field missing or unusable
            left_out.append(path.name)
            continue
        if isinstance(saved.get("step"), int) and saved["step"] != step:
            left_out.append(f"{path.name} (of step {saved['step']:,}, not this checkpoint's)")
            continue
        if key == "patching":
            records["patching"][record["point"]] = record
        else:
            records[key] = record
    return records, left_out


def findings_of(records: dict[str, Any]) -> list[str]:
    """The findings the saved records show, as far as they can be read."""
    found: list[str] = []
    try:
        found.extend(all_findings(records))  # those before a record that cannot be read are kept
    except (KeyError, TypeError, ValueError, IndexError):
        found.append("a saved inspect record could not be read; run `gpt-train inspect RUN report` again")
    return found


def example_prompts(vocabulary: Vocabulary) -> list[str]:
    """The prompts the page offers; none, with the task's reason on stderr, where it has none to give (a text run
    whose corpus is gone: its examples are held-out text of it): the page still answers a typed prompt."""
    try:
        return vocabulary.example_prompts()
    except ValueError as error:
        click.echo(f"gpt-train: note: the page offers no example prompts ({error}); type one", err=True)
        return []


class ServeError(TrainError):
    """The server cannot start: its address is taken or not this machine's."""


class Explorer:
    def __init__(self, run_dir: Path, device: torch.device, trust_kernels: bool = False):
        saved = load_run(run_dir, device, trust_kernels)
        self.model = saved.model
        self.device = device
        self.vocabulary: Vocabulary = saved.config.build_sampler()
        self.lock = threading.Lock()
        records, left_out = saved_records(RunLayout(run_dir), self.model, saved.step)
        layer, head = most_needed_head(records["heads"]) if "heads" in records else (0, 0)
        self.summary = {
            "title": f"{saved.config.task} — {RunLayout(run_dir).name}",
            "task": saved.config.task,
            "step": saved.step,
            "layers": self.model.config.n_layer,
            "heads": self.model.config.n_head,
            "block_size": self.model.config.block_size,
            "open": {"layer": layer, "head": head, "by": "ablation" if "heads" in records else "first layer"},
            "examples": example_prompts(self.vocabulary),
            "findings": findings_of(records),
            "records": records,
            "left_out": left_out,
        }
        self.summary_json = json.dumps(self.summary, allow_nan=False).encode("utf-8")
        self.page = filled_page("gpt_train.lab", PAGE, "gpt-train serve", {}).encode("utf-8")

    def prompt(self, text: str) -> dict[str, Any]:
        with self.lock:
            return explain_prompt(self.vocabulary, self.model, self.device, text).to_json()


def host_name(host: str) -> str:
    """The name in a Host header or a --allow-host value, lower case, without port, brackets or a trailing dot
    ("" for one that names nothing, "[evil")."""
    try:
        return (urlsplit(f"//{host}").hostname or "").removesuffix(".")
    except ValueError:
        return ""


def is_loopback(address: str) -> bool:
    """Whether an IP address is the loopback's, IPv4-mapped ones (::ffff:127.0.0.1) included (False for a name)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def names_this_machine(host: str | None, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether a request's Host header names the loopback (or one of `allowed`, by `host_name`): a browser page of
    another site that has pointed its own name at 127.0.0.1 (DNS rebinding) sends its own name, and must not read
    the model's answers."""
    if host is None:  # HTTP/1.0 without one: no browser sends such a request
        return True
    name = host_name(host)
    return name in allowed or is_loopback(name) or name == "localhost" or name.endswith(".localhost")  # RFC 6761


class Handler(BaseHTTPRequestHandler):
    """GET /, /api/run and /api/prompt?text=...; another path is 404, POST, PUT, DELETE and PATCH 405, and a method the
    server knows nothing of (HEAD, OPTIONS) 501, both with `Allow: GET`. Listening on the loopback, a request
    addressed to another name is 403. Every answer but the page is JSON, the standard library's own refusals (a
    request line or header too long, one it cannot parse) included."""

    explorer: Explorer  # set on the subclass make_server builds
    allowed: frozenset[str] = frozenset()  # the names --allow-host adds to the loopback's
    server_version = "gpt-train-serve"
    sys_version = ""

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        host = self.headers.get("Host")
        if is_loopback(self.server.server_address[0]) and not names_this_machine(host, self.allowed):
            error = f"this server answers requests to localhost, not to {host!r}; serve --allow-host names another"
            self.send_json(HTTPStatus.FORBIDDEN, {"error": error})
            return False
        return True

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/":
            self.send(HTTPStatus.OK, self.explorer.page, "text/html; charset=utf-8")
        elif url.path == "/api/run":
            self.send(HTTPStatus.OK, self.explorer.summary_json, "application/json")
        elif url.path == "/api/prompt":
            self.answer_prompt(url.query)
        else:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": "not found: this server serves its page and its JSON only"})

    def answer_prompt(self, query: str) -> None:
        try:
            fields = parse_qs(query, keep_blank_values=True, errors="strict", max_num_fields=4)
        except UnicodeDecodeError:
            return self.send_json(HTTPStatus.BAD_REQUEST, {"error": "the prompt is not UTF-8 text"})
        except ValueError:
            return self.send_json(HTTPStatus.BAD_REQUEST, {"error": "the request has too many fields"})
        try:
            view = self.explorer.prompt(fields.get("text", [""])[0])
            body = json.dumps(view, allow_nan=False).encode("utf-8")  # NaN from a model's weights: its failure
        except PromptError as error:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        except Exception as error:  # the model failing on one prompt must not take the page down
            self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the model failed on this prompt: {error}"})
        else:  # sent outside the try: a client gone meanwhile is not the model failing
            self.send(HTTPStatus.OK, body, "application/json")

    def do_POST(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED)

    do_PUT = do_DELETE = do_PATCH = do_POST

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's error page as JSON: it calls this for a method without a do_ method (501), a
        request line or header too long (414, 431) and a request it cannot parse (400)."""
        status = HTTPStatus(code)
        headers = {"Connection": "close"}  # as the standard library's (send_header then ends the connection)
        if status in (HTTPStatus.METHOD_NOT_ALLOWED, HTTPStatus.NOT_IMPLEMENTED):
            message = "only GET is served"
            headers["Allow"] = "GET"
        body = json.dumps({"error": message or status.phrase}).encode("utf-8")
        self.send(status, body, "application/json", headers)

    def send_json(self, status: HTTPStatus, data: Any) -> None:
        self.send(status, json.dumps(data, allow_nan=False).encode("utf-8"), "application/json")

    def send(self, status: HTTPStatus, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (SECURITY_HEADERS | (headers or {})).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD request's answer is the headers alone
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the address and how to stop, not every request."""


class ExplorerServer(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS connections, each in its own thread; one that disconnects or times out ends quietly."""

    daemon_threads = True  # a request still running never keeps Ctrl-C from ending the process
    busy_reply = (
        b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        b'{"error": "the server is busy with other connections; try again"}'
    )

    def __init__(self, *args: Any, **kwargs: Any):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(self.busy_reply)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:  # no thread started (Ctrl-C is not this: it may come after the thread took the slot)
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client gone away or quiet
            return
        super().handle_error(request, client_address)


def make_server(
    explorer: Explorer, host: str = LOOPBACK, port: int = DEFAULT_PORT, allowed: tuple[str, ...] = ()
) -> ExplorerServer:
    """A server for `explorer` bound to host:port (port 0: any free one; an IPv6 host such as ::1 too), answering
    requests to the loopback's names and to `allowed`; serve_forever() runs it."""
    names = frozenset(host_name(name) for name in allowed) - {""}
    handler = type(
        "ExplorerHandler", (Handler,), {"explorer": explorer, "timeout": CONNECTION_TIMEOUT, "allowed": names}
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return type("Server", (ExplorerServer,), {"address_family": family})((host, port), handler)


@click.command()
@click.argument("run_dir", metavar="RUN", type=RUN)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True, help="0: any free port."
)
@click.option(
    "--host",
    default=LOOPBACK,
    show_default=True,
    help="The address to listen on. One beyond the loopback (0.0.0.0, a LAN address) lets other machines use the "
    "model.",
)
@click.option(
    "--allow-host",
    "allowed",
    multiple=True,
    metavar="NAME",
    help="Also answer requests addressed to NAME (a proxy's or a forwarded port's host name); on the loopback, "
    "requests to any other name are refused, so that no web page can read the model through its own name.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:N, mps or auto.")
@TRUST_KERNELS_OPTION
def serve(run_dir: Path, port: int, host: str, allowed: tuple[str, ...], device: str, trust_kernels: bool) -> None:
    """Serve the explorer on your own prompts: type one, see the model's answer, the probability of each
    answer token, every head's attention, the logit lens, where prompt and answer meet, and the inspect
    results the run holds. Ctrl-C stops it.

    RUN is a run directory, or a task name for that task's newest run under ./runs.

    \b
    Examples:
      gpt-train serve sort
      gpt-train serve sort --port 8000
      gpt-train serve sort --allow-host devbox.example   # reached through a proxy by that name
    """
    if not host.strip():  # an unset variable: the socket would listen on every address
        raise ServeError("--host is empty; name an address (127.0.0.1 by default, 0.0.0.0 for every one)")
    explorer = Explorer(run_dir, resolve_device(device), trust_kernels)
    try:
        server = make_server(explorer, host, port, allowed)
    except OSError as error:
        raise ServeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    address, bound = server.server_address[:2]
    if not is_loopback(address):
        click.echo(
            f"gpt-train: warning: listening on {address}, beyond this machine's loopback: anyone who can reach it "
            f"on port {bound} can use the model",
            err=True,
        )
    try:
        with ctrl_c_interrupts():
            shown = f"[{address}]" if ":" in address else address
            click.echo(f"serving {run_dir} at http://{shown}:{bound}/ (Ctrl-C stops)")  # Ctrl-C from now on stops
            server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()
