"""gpt-train serve: the model on a typed prompt equals run_with_cache and `gpt-train sample`; bad and hostile
requests are answered, never crash the server; Ctrl-C stops it; and in Chromium the page shows what the
model computed, a message for a bad prompt, and makes no request past 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
import torch
from lab_runs import gpt_train, trained_sort
from train_helpers import assert_one_line_error, serve_then_ctrl_c

from gpt_core import block_hook
from gpt_train.lab import serve as serve_module
from gpt_train.lab.explain import explain_prompt
from gpt_train.lab.serve import LOOPBACK, Explorer, make_server
from gpt_train.loading import load_run
from gpt_train.prompts import PromptError
from gpt_viz import RunLayout

CPU = torch.device("cpu")
PROMPT = "3914"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A trained run with its head ablation saved (the page's panels and the head it opens on)."""
    run_dir = trained_sort(tmp_path_factory.mktemp("serve") / "sort")
    gpt_train("inspect", run_dir, "heads", "--examples", 200, "--device", "cpu")
    return run_dir


@pytest.fixture(scope="module")
def server(run_dir) -> Iterator[str]:
    """The explorer served on a free loopback port, in this process: its base URL."""
    httpd = make_server(Explorer(run_dir, CPU), LOOPBACK, 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOOPBACK}:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def get(base: str, path: str, method: str = "GET") -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request(method, path)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body


def raw(base: str, request: bytes) -> bytes:
    """Send `request` as it is (no client tidying it) and return whatever comes back."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def sample_answer(run_dir: Path, prompt: str, capsys) -> str:
    capsys.readouterr()
    gpt_train("sample", run_dir, "--prompt", prompt, "--device", "cpu")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"{prompt} -> ")
    return line.removeprefix(f"{prompt} -> ")


# the model on a prompt -----------------------------------------------------------------------
def tiny_text_run(corpus: Path, out: Path) -> Path:
    """A 1-layer text run of 2 steps on `corpus`, block 16, trained into `out`."""
    gpt_train("run", "--task", "text", "--data", corpus, "--set", "block_size=16", "--set", "chunk_size=64",
              "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--steps", 2, "--device", "cpu",
              "--set", "final_eval_limit=8", "--quiet", "--no-pictures", "--out", out)  # fmt: skip
    return out


def test_the_prompt_view_is_samples_answer_and_run_with_caches_attention(run_dir, capsys):
    run = load_run(run_dir, CPU)
    model, task = run.model, run.task
    view = explain_prompt(run.config.build_sampler(), model, CPU, PROMPT)
    assert view.answer == sample_answer(run_dir, PROMPT, capsys)
    read = torch.tensor([task.encode(PROMPT + view.answer)[:-1]])
    names = [block_hook(layer, "pattern") for layer in range(2)]
    with torch.no_grad():
        logits, cache = model.run_with_cache(read, names=names)
    for layer in range(2):
        assert torch.allclose(torch.tensor(view.attention[layer]), cache[names[layer]][0], atol=1e-6)
    assert view.tokens == list(PROMPT + view.answer)[:-1] and view.prompt_length == len(PROMPT)
    probabilities = torch.softmax(logits[0, len(PROMPT) - 1 :], dim=-1)  # where each answer token was written
    expected = [float(probabilities[i, token]) for i, token in enumerate(task.encode(view.answer))]
    assert view.answer_probability == pytest.approx(expected, abs=1e-6)
    assert view.lens_top[-1][len(PROMPT) - 1 :] == list(view.answer)  # the last depth is the model's own
    assert view.note == ""  # a prompt of the trained length


def test_a_prompt_of_a_length_never_trained_on_gets_one_answer_token_a_digit_and_a_note(run_dir, capsys):
    run = load_run(run_dir, CPU)
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, "391")
    assert len(view.answer_tokens) == 3 and view.answer == sample_answer(run_dir, "391", capsys)
    example = run.task.example_prompts()[0]
    assert view.note == (
        f"sort trains on prompts of 4 tokens, like {example!r}, and this one has 3: the model never learned to answer"
        " it"
    )


def test_the_explorer_notes_an_answer_the_models_positions_cut_short_as_sample_does(run_dir, capsys):
    run = load_run(run_dir, CPU)
    limit = run.model.config.position_limit
    prompt = "3" * (limit - 1)  # an answer as long as the prompt, of which 2 tokens fit the positions
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, prompt)
    assert view.answer == sample_answer(run_dir, prompt, capsys)
    said = f"never learned to answer it; the answer is cut to 2 of its {limit - 1} tokens: the model reads {limit} "
    assert view.note.endswith(said + "positions")


def test_the_explorer_notes_a_modadd_prompt_that_is_not_two_numbers_then_equals(tmp_path):
    run_dir = tmp_path / "modadd"
    gpt_train("run", "--task", "modadd", "--set", "p=11", "--steps", 2, "--device", "cpu", "--quiet", "--no-pictures",
              "--out", run_dir)  # fmt: skip
    run = load_run(run_dir, CPU)
    vocabulary, model = run.config.build_sampler(), run.model
    assert explain_prompt(vocabulary, model, CPU, "3 4 =").note == ""
    view = explain_prompt(vocabulary, model, CPU, "1 2")
    assert view.note.startswith("modadd trains on prompts of two numbers then '='") and "'1 2'" in view.note


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("", "it is empty"),
        ("39a4", "cannot encode '39a4'"),
        ("1" * 8, "the prompt is 8 tokens long; the model's learned positions read at most 7"),
        ("1" * 100_000, "100,000 characters long"),
    ],
)
def test_a_prompt_the_model_cannot_read_is_one_line(run_dir, prompt, message):
    run = load_run(run_dir, CPU)
    with pytest.raises(PromptError, match=message):
        explain_prompt(run.config.build_sampler(), run.model, CPU, prompt)


def test_a_rope_model_is_explained_on_a_prompt_longer_than_its_block_as_sample_answers_it(tmp_path):
    run_dir = tmp_path / "rope"
    gpt_train("run", "--task", "sort", "--set", "length=3", "--set", "pos=rope", "--steps", 2, "--device", "cpu",
              "--quiet", "--no-pictures", "--out", run_dir)  # fmt: skip
    run = load_run(run_dir, CPU)
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, "3141592")  # block 5: 7 digits run past it
    assert view.prompt == "3141592" and len(view.answer) == 7
    with pytest.raises(PromptError, match="the prompt is 1,999 tokens long; the explorer reads at most 256"):
        explain_prompt(run.config.build_sampler(), run.model, CPU, "5" * 1999)  # its attention: 0.9 GB of JSON
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, "5" * 250)
    assert len(view.tokens) == 256 and len(view.answer) == 7  # the answer cut where the page's tokens end


def test_the_explorer_names_its_own_read_limit_when_it_cuts_a_rope_models_answer(tmp_path):
    """The note blamed the model's positions, "the model reads None positions", for the explorer's own limit."""
    run_dir = tmp_path / "rope"
    gpt_train("run", "--task", "sort", "--set", "length=3", "--set", "pos=rope", "--steps", 2, "--device", "cpu",
              "--quiet", "--no-pictures", "--out", run_dir)  # fmt: skip
    run = load_run(run_dir, CPU)
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, "5" * 200)
    assert len(view.answer) == 57  # 257 tokens: the last of them is never read
    said = (
        "the answer is cut to 57 of its 200 tokens: the explorer reads at most 256 tokens, prompt and answer together"
    )
    assert view.note.endswith("; " + said)


def test_the_explorer_answers_a_randomized_positions_model_as_sample_does(tmp_path, capsys):
    """The page drew the position ids from the analyses' seed, sample from the prompt's: two answers to one prompt."""
    run_dir = tmp_path / "randomized"
    gpt_train("run", "--task", "sort", "--set", "randomized_positions=true", "--set", "max_positions=32",
              "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2", "--steps", 60, "--device", "cpu",
              "--set", "final_eval_limit=50", "--quiet", "--no-pictures", "--out", run_dir)  # fmt: skip
    run = load_run(run_dir, CPU)
    vocabulary = run.config.build_sampler()
    for prompt in ("902714", "555123", "987654", "102030", "314159", "271828"):
        assert explain_prompt(vocabulary, run.model, CPU, prompt).answer == sample_answer(run_dir, prompt, capsys)


def test_a_text_prompt_longer_than_half_a_block_is_explained_within_the_positions(tmp_path):
    """sample's answer of at least half a block ran a learned-position model past its table in the page's pass."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the night is young and so are we\n" * 300)
    run_dir = tiny_text_run(corpus, tmp_path / "text")
    run = load_run(run_dir, CPU)
    view = explain_prompt(run.config.build_sampler(), run.model, CPU, "the night is")  # 12 of 16 positions
    assert len(view.tokens) == 16 and len(view.answer) == 5
    assert view.note == "the answer is cut to 5 of its 8 tokens: the model reads 16 positions"


# the server ----------------------------------------------------------------------------------
def test_the_server_serves_its_page_the_runs_summary_and_the_model_on_a_prompt(server, run_dir):
    status, page = get(server, "/")
    assert status == 200 and b"<title>gpt-train serve</title>" in page
    status, body = get(server, "/api/run")
    summary = json.loads(body)
    assert status == 200 and (summary["layers"], summary["heads"]) == (2, 2)
    ablation = json.loads((run_dir / "inspect_heads.json").read_text())
    zero = ablation["zero"]
    needed = min((zero[layer][head], layer, head) for layer in range(2) for head in range(2))
    assert summary["open"] == {"layer": needed[1], "head": needed[2], "by": "ablation"}
    assert any(finding.startswith("layer 0's attention") for finding in summary["findings"])
    status, body = get(server, f"/api/prompt?text={PROMPT}")
    assert status == 200 and json.loads(body)["prompt"] == PROMPT


HOSTILE_PATHS = [
    "/../../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/..%2f..%2fetc%2fpasswd",
    "/config.json",
    "/checkpoint.safetensors",
    "/api/../config.json",
    "//etc/passwd",
    "/serve_page.html",
    "/api/prompt/../../config.json",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_no_path_reaches_a_file_only_the_page_and_its_json_are_served(server, path):
    status, body = get(server, path)
    assert status == 404, (path, body[:200])
    assert json.loads(body) == {"error": "not found: this server serves its page and its JSON only"}


def test_hostile_prompts_are_answered_with_a_message_and_the_server_keeps_serving(server):
    status, body = get(server, "/api/prompt?text=%ff%fe%fd")  # not UTF-8
    assert (status, json.loads(body)) == (400, {"error": "the prompt is not UTF-8 text"})
    status, body = get(server, "/api/prompt?text=" + "9" * 5_000)  # far past the block
    assert status == 400 and "5,000 characters long" in json.loads(body)["error"]
    status, _ = get(server, "/api/prompt?text=" + "9" * 100_000)  # past the request-line limit
    assert status == 414
    status, body = get(server, "/api/prompt?" + "&".join(f"f{i}=1" for i in range(50)))
    assert (status, json.loads(body)) == (400, {"error": "the request has too many fields"})
    status, body = get(server, "/api/prompt?text=" + quote("<script>alert(1)</script>"))
    assert status == 400 and "cannot encode" in json.loads(body)["error"]
    reply = raw(server, b"GET /api/prompt?text=\xff\xfe HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.0 400") and b"cannot encode" in reply
    reply = raw(server, b"\x00\x01garbage\r\n\r\n")  # no HTTP version: answered the HTTP/0.9 way, a bare body
    assert json.loads(reply) == {"error": "Bad request syntax ('\\x00\\x01garbage')"}
    assert get(server, "/", method="POST")[0] == 405
    assert get(server, f"/api/prompt?text={PROMPT}")[0] == 200


def reply_parts(reply: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """The status line, headers (lower-case names) and body of a raw HTTP reply."""
    head, _, body = reply.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status.encode(), {name.lower(): value for name, value in headers.items()}, body


@pytest.mark.parametrize(
    ("request_", "status", "error"),
    [
        (b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n", b"405", "only GET is served"),
        (b"DELETE /api/run HTTP/1.1\r\nHost: localhost\r\n\r\n", b"405", "only GET is served"),
        (b"OPTIONS / HTTP/1.1\r\nHost: localhost\r\n\r\n", b"501", "only GET is served"),
        (b"BREW / HTTP/1.1\r\nHost: localhost\r\n\r\n", b"501", "only GET is served"),
        (b"GET /?" + b"9" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414", "Request-URI Too Long"),
        (b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"9" * 70_000 + b"\r\n\r\n", b"431", "Line too long"),
        (b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n", b"431", "Too many headers"),
    ],
    ids=["POST", "DELETE", "OPTIONS", "unknown method", "URI too long", "header too long", "too many headers"],
)
def test_every_refusal_is_json_and_a_method_not_served_names_get_in_allow(server, request_, status, error):
    """The standard library's refusals were its HTML error page, and a 405 lacked the Allow header HTTP asks for."""
    line, headers, body = reply_parts(raw(server, request_))
    assert line.startswith(b"HTTP/1.0 " + status), line
    assert headers["content-type"] == "application/json" and headers["x-content-type-options"] == "nosniff"
    assert json.loads(body) == {"error": error}
    assert headers.get("allow") == ("GET" if status in (b"405", b"501") else None)


def test_a_head_request_is_answered_with_headers_alone(server):
    line, headers, body = reply_parts(raw(server, b"HEAD / HTTP/1.1\r\nHost: localhost\r\n\r\n"))
    assert line.startswith(b"HTTP/1.0 501") and headers["allow"] == "GET" and body == b""
    assert headers["content-type"] == "application/json"


REFUSED_HOSTS = ["attacker.example", "attacker.example:8765", "127.0.0.1.nip.io", "localhost.attacker.example",
                 "[::2]:80", "[evil", "[::1"]  # fmt: skip


@pytest.mark.parametrize("host", REFUSED_HOSTS)
def test_a_request_addressed_to_another_name_is_refused_so_a_rebound_page_cannot_read_the_model(server, host):
    for path in ("/", "/api/run", f"/api/prompt?text={PROMPT}"):
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        reply = raw(server, request)
        assert reply.startswith(b"HTTP/1.0 403"), reply[:200]
        error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
        assert error == f"this server answers requests to localhost, not to {host!r}; serve --allow-host names another"


def test_allow_host_adds_a_name_the_server_answers_to(run_dir):
    httpd = make_server(Explorer(run_dir, CPU), LOOPBACK, 0, allowed=("DevBox.example.", "10.1.2.3", "proxy:8080"))
    with httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://{LOOPBACK}:{httpd.server_address[1]}"
        answered = [("devbox.example:8765", b"200"), ("10.1.2.3:8765", b"200"), ("proxy", b"200")]
        for host, status in [*answered, ("other.example", b"403"), ("10.1.2.4", b"403")]:
            reply = raw(base, f"GET /api/run HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            assert reply.startswith(b"HTTP/1.0 " + status), reply[:200]
        httpd.shutdown()


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:1",
        "localhost.",
        "app.localhost",
        "127.0.0.1",
        "127.0.0.2:9",
        "[::1]:8765",
        "[::ffff:127.0.0.1]",
        None,
    ],  # fmt: skip
)
def test_a_request_addressed_to_the_loopback_is_served(server, host):
    line = b"" if host is None else f"Host: {host}\r\n".encode()
    reply = raw(server, b"GET /api/run HTTP/1.0\r\n" + line + b"\r\n")
    assert reply.startswith(b"HTTP/1.0 200"), reply[:200]


def test_an_ipv4_mapped_loopback_address_is_the_loopback_and_a_name_is_no_address():
    from gpt_train.lab.serve import is_loopback

    assert is_loopback("::ffff:127.0.0.1") and is_loopback("127.8.0.1") and is_loopback("::1")
    assert not any(map(is_loopback, ["0.0.0.0", "::ffff:10.0.0.1", "localhost", ""]))


def test_serve_listens_on_the_ipv6_loopback_when_asked(run_dir):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        httpd = make_server(Explorer(run_dir, CPU), "::1", 0)
    except OSError as error:  # a machine whose kernel has IPv6 switched off
        pytest.skip(f"cannot bind ::1: {error}")
    with httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        connection = http.client.HTTPConnection("::1", httpd.server_address[1], timeout=60)
        connection.request("GET", "/api/run")
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["layers"] == 2
        connection.close()
        httpd.shutdown()


def test_many_requests_at_once_all_get_the_same_answer(server):
    _, alone = get(server, f"/api/prompt?text={PROMPT}")
    with ThreadPoolExecutor(max_workers=24) as pool:
        replies = list(pool.map(lambda _: get(server, f"/api/prompt?text={PROMPT}"), range(48)))
    assert all(status == 200 for status, _ in replies)
    assert all(json.loads(body) == json.loads(alone) for _, body in replies)


@pytest.fixture
def tiny_server(tiny_run) -> Iterator[tuple[str, int]]:
    """The explorer of the tiny run served in this process, as `serving` builds it: (host, port)."""
    yield from serving(tiny_run)


def serving(run_dir: Path) -> Iterator[tuple[str, int]]:
    yield from serving_explorer(Explorer(run_dir, CPU))


def serving_explorer(explorer: Explorer) -> Iterator[tuple[str, int]]:
    httpd = make_server(explorer, LOOPBACK, 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield LOOPBACK, httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_clients_that_go_away_before_their_answer_leave_nothing_on_the_terminal(tiny_server, capsys):
    capsys.readouterr()
    for path in ("/api/prompt?text=3914", "/api/run", "/"):
        for _ in range(3):
            sock = socket.create_connection(tiny_server)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closed with a reset
            sock.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
            sock.close()
    time.sleep(1.0)  # the server answers each into a closed connection
    base = f"http://{tiny_server[0]}:{tiny_server[1]}"
    assert get(base, "/api/prompt?text=3914")[0] == 200
    assert capsys.readouterr().err == ""


def test_a_model_answering_nan_is_a_message_and_nothing_on_the_terminal(tiny_run, capsys):
    explorer = Explorer(tiny_run, CPU)
    with torch.no_grad():
        for parameter in explorer.model.parameters():
            parameter.fill_(float("nan"))
    for host, port in serving_explorer(explorer):
        capsys.readouterr()
        status, body = get(f"http://{host}:{port}", "/api/prompt?text=3914")
        assert status == 500 and json.loads(body)["error"].startswith("the model failed on this prompt: ")
        assert capsys.readouterr().err == ""


def test_a_client_that_sends_part_of_a_request_is_cut_off_at_the_connection_timeout(tiny_run, monkeypatch):
    monkeypatch.setattr(serve_module, "CONNECTION_TIMEOUT", 0.5)
    for address in serving(tiny_run):
        for partial in (b"GET /api/run HTTP/1.0\r\nX-Slow: ", b"GET /\r\n", b"GE"):
            with socket.create_connection(address, timeout=20) as sock:
                sock.sendall(partial)
                began = time.monotonic()
                while sock.recv(4096):  # whatever answer comes, then the end of the connection
                    pass
                assert time.monotonic() - began < 10, partial


def test_connections_past_the_limit_are_answered_busy_and_the_server_serves_again_once_they_close(
    tiny_run, monkeypatch
):
    monkeypatch.setattr(serve_module, "MAX_CONNECTIONS", 2)
    for address in serving(tiny_run):
        idle = [socket.create_connection(address, timeout=20) for _ in range(2)]
        for sock in idle:
            sock.sendall(b"GET /api/run HTTP/1.0\r\n")  # and never the blank line
        with socket.create_connection(address, timeout=20) as sock:
            assert sock.recv(4096).startswith(b"HTTP/1.0 503 Service Unavailable")
        for sock in idle:
            sock.close()
        base = f"http://{address[0]}:{address[1]}"
        deadline = time.monotonic() + 10
        while (status := get(base, "/api/run")[0]) == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("started", [None, _ignore_sigint], ids=["as usual", "with SIGINT ignored"])
def test_ctrl_c_stops_the_server_cleanly(run_dir, started):
    def answers(line: str) -> None:
        assert line.startswith(f"serving {run_dir} at http://127.0.0.1:") and "(Ctrl-C stops)" in line
        assert get(line.split(" at ")[1].split("/ ")[0], "/api/run")[0] == 200

    # a process started with SIGINT ignored would keep ignoring it, left to Python
    _, result = serve_then_ctrl_c(run_dir, "--port", 0, while_serving=answers, preexec_fn=started)
    assert result.code == 0, result.err
    assert result.out.strip() == "stopped" and "Traceback" not in result.err
    assert "warning" not in result.err  # loopback: nothing to warn of


def test_a_text_run_whose_corpus_is_gone_is_served_without_example_prompts_and_a_note(tmp_path):
    """The server did not start: a traceback ending in the task's "give --prompt", an option serve has not."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    run_dir = tiny_text_run(corpus, tmp_path / "text")
    corpus.unlink()
    served = {}

    def answers(line: str) -> None:
        assert line.startswith(f"serving {run_dir} at "), line
        base = line.split(" at ")[1].split("/ ")[0]
        served["run"] = json.loads(get(base, "/api/run")[1])
        served["prompt"] = get(base, "/api/prompt?text=the")

    line, result = serve_then_ctrl_c(run_dir, "--port", 0, while_serving=answers)
    assert line.startswith(f"serving {run_dir} at "), (line, result.err)
    assert result.code == 0 and "Traceback" not in result.err
    note = result.err.strip().splitlines()[-1]
    assert note.startswith("gpt-train: note: the page offers no example prompts (") and note.endswith("; type one")
    assert "not at hand" in note, note  # the task's own reason
    assert served["run"]["examples"] == [] and served["prompt"][0] == 200


def test_serving_beyond_loopback_warns_that_other_machines_can_use_the_model(run_dir):
    line, result = serve_then_ctrl_c(run_dir, "--host", "0.0.0.0", "--port", 0)
    assert line.startswith(f"serving {run_dir} at http://0.0.0.0:"), (line, result.err)
    port = line.split(":")[-1].split("/")[0]
    assert result.err.strip() == (
        f"gpt-train: warning: listening on 0.0.0.0, beyond this machine's loopback: anyone who can reach it on port "
        f"{port} can use the model"
    )


def test_an_empty_host_is_refused_not_taken_for_every_address(cli, run_dir):
    """ "" (an unset variable) listened on 0.0.0.0, with only a warning."""
    assert_one_line_error(cli("serve", run_dir, "--host", "", "--port", 0), "--host is empty; name an address")


def test_serve_listens_on_loopback_unless_told_otherwise():
    from gpt_train.lab.serve import serve

    host = next(param for param in serve.params if param.name == "host")
    assert host.default == "127.0.0.1"


# the page in a browser -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    from browser_helpers import launched_browser

    yield from launched_browser()


@pytest.fixture
def page(browser, server):
    requests, errors = [], []
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    yield page
    page.close()
    assert errors == []
    assert requests and all(url.startswith(server + "/") for url in requests), requests


def ask(page, prompt: str) -> None:
    before = int(page.evaluate("+(document.body.dataset.answered || 0)"))
    page.fill("#prompt", prompt)
    page.click("#go")
    page.wait_for_function(f"() => +(document.body.dataset.answered || 0) > {before}", timeout=20_000)


def test_a_typed_prompt_shows_samples_answer_and_the_chosen_heads_attention(page, run_dir, capsys):
    prompt = "8015"
    ask(page, prompt)
    answer = sample_answer(run_dir, prompt, capsys)
    assert page.inner_text("#answer") == answer
    run = load_run(run_dir, CPU)
    model, read = run.model, torch.tensor([run.task.encode(prompt + answer)[:-1]])
    page.select_option("#layer", "1")
    page.select_option("#head", "0")
    with torch.no_grad():
        _, cache = model.run_with_cache(read, names=["blocks.1.pattern"])
    expected = cache["blocks.1.pattern"][0, 0]  # (T, T)
    table = page.locator("#attention")
    assert table.evaluate("t => [t.dataset.layer, t.dataset.head]") == ["1", "0"]
    cells = table.locator("td").evaluate_all("cells => cells.map(c => [+c.dataset.q, +c.dataset.k, c.textContent])")
    shown = [(q, k, text) for q, k, text in cells if text]
    assert len(shown) == len(read[0]) * (len(read[0]) + 1) // 2  # every causal cell, none above the diagonal
    for q, k, text in shown:
        assert abs(float(text) - float(expected[q, k])) <= 0.0005 + 1e-7, (q, k, text)
    assert page.locator("#tokens span.meet").count() == 1  # where prompt and answer meet
    assert page.locator("#tokens span.prompt").all_inner_texts() == list(prompt)
    assert page.locator("#predictions tr").count() == 1 + len(answer)
    assert page.locator("#lens tr").count() == 1 + 5  # the embeddings, then each layer's attention and MLP
    assert page.inner_text("#untrained") == ""
    ask(page, "801")  # a length the model never trained on: the page says so
    assert "never learned to answer it" in page.inner_text("#untrained")


def test_a_bad_prompt_shows_a_message_on_the_page(page):
    ask(page, "12x4")
    assert "cannot encode '12x4'" in page.inner_text("#message")
    assert page.locator("#result").is_hidden()
    ask(page, "")
    assert page.inner_text("#message") == "type a prompt: it is empty"
    ask(page, PROMPT)
    assert page.inner_text("#message") == "" and page.locator("#result").is_visible()


def test_the_page_opens_on_the_head_the_model_needs_most(page, server):
    opened = json.loads(get(server, "/api/run")[1])["open"]
    assert (page.input_value("#layer"), page.input_value("#head")) == (str(opened["layer"]), str(opened["head"]))
    assert page.locator("#ablation tr").count() == 1 + 4


def test_a_record_of_an_earlier_checkpoint_is_left_out_and_named_not_shown_as_this_ones(run_dir, tmp_path):
    """`inspect` on a run that then trains on: its findings are of a checkpoint the server no longer serves."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    current = Explorer(copy, CPU).summary
    assert "heads" in current["records"] and current["left_out"] == []
    heads = RunLayout(copy).heads_ablation
    heads.write_text(json.dumps(json.loads(heads.read_text()) | {"step": current["step"] - 1}))
    older = Explorer(copy, CPU).summary
    assert "heads" not in older["records"] and older["open"]["by"] == "first layer"
    assert older["left_out"] == [f"{heads.name} (of step {current['step'] - 1:,}, not this checkpoint's)"]


def test_the_page_survives_a_record_it_cannot_draw_and_says_what_was_left_out(browser, tiny_run):
    explorer = Explorer(tiny_run, CPU)
    explorer.summary["records"]["heads"] = {  # past the server's checks: the page must not depend on them
        "metric": "exact_match", "examples": 10, "baseline": "0.9", "zero": [[0.1, 0.2]], "mean": [[0.1, 0.2]],
        "layer_zero": [0.1], "higher_is_better": True,
    }  # fmt: skip
    explorer.summary["left_out"] = ["inspect_reads.json"]
    explorer.summary_json = json.dumps(explorer.summary).encode()
    for host, port in serving_explorer(explorer):
        page = browser.new_page()
        page.goto(f"http://{host}:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        assert page.evaluate("document.body.dataset.answered") == "1"  # the form is wired: the example was asked
        left_out = page.inner_text("#left-out")
        assert "inspect_reads.json" in left_out and "a record the page could not draw" in left_out
        page.close()


def opened(browser, explorer: Explorer) -> Iterator[tuple[object, list[str]]]:
    """The page of `explorer` served in this process, once it has drawn its first example's answer; and the errors
    its console shows and its requests that fail, gathered as it goes."""
    errors: list[str] = []

    def console(message) -> None:
        if message.type == "error":
            errors.append(message.text)

    def response(answer) -> None:
        if answer.status >= 400:
            errors.append(f"{answer.status} {answer.url}")

    for host, port in serving_explorer(explorer):
        page = browser.new_page()
        page.on("console", console)
        page.on("response", response)
        page.goto(f"http://{host}:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        yield page, errors
        page.close()


def asked_twice(page, first: str, second: str) -> None:
    """Ask `first`, then `second` before `first`'s reply (slowed by the test) comes, and wait for both replies."""
    before = int(page.evaluate("+(document.body.dataset.answered || 0)"))
    for prompt in (first, second):
        page.fill("#prompt", prompt)
        page.click("#go")
    page.wait_for_function(f"() => +(document.body.dataset.answered || 0) >= {before + 2}", timeout=20_000)


def test_only_the_latest_prompts_answer_is_drawn_whichever_reply_comes_last(browser, tiny_run):
    """An earlier prompt's reply arriving last was drawn under the newer prompt, or over its error message."""
    explorer = Explorer(tiny_run, CPU)
    answer_of = explorer.prompt
    slow = {"1234", "12y4"}  # answered after the prompt asked next

    def prompt(text: str) -> dict:
        if text in slow:
            time.sleep(1.5)
        return answer_of(text)

    explorer.prompt = prompt
    for page, _ in opened(browser, explorer):
        asked_twice(page, "1234", "4321")
        assert page.locator("#tokens span.prompt").all_inner_texts() == list("4321")
        assert page.inner_text("#answer") == answer_of("4321")["answer"]
        asked_twice(page, "1234", "12x4")
        assert "cannot encode '12x4'" in page.inner_text("#message") and page.locator("#result").is_hidden()
        asked_twice(page, "12y4", "4321")
        assert page.inner_text("#message") == "" and page.locator("#result").is_visible()
        assert page.locator("#tokens span.prompt").all_inner_texts() == list("4321")


def test_the_answer_line_shows_the_answers_leading_spaces_and_newlines(browser, tiny_run):
    """A text model's answer such as "\\nTo be" lost its newline and leading spaces on the answer line."""
    explorer = Explorer(tiny_run, CPU)
    answer_of = explorer.prompt
    written = "  t>\nTo be"
    explorer.prompt = lambda text: answer_of(text) | {"answer": written}
    for page, _ in opened(browser, explorer):
        assert page.inner_text("#answer") == written


def test_the_summary_counts_one_layer_in_the_singular_and_the_console_shows_no_error(browser, tiny_run):
    """'1 layers of 2 heads'; and the browser's request for /favicon.ico was a 404 in the console."""
    for page, errors in opened(browser, Explorer(tiny_run, CPU)):
        assert page.inner_text("#summary").startswith("1 layer of 2 heads, block of ")
        page.wait_for_timeout(500)  # the browser asks for an icon after the page has loaded
        assert errors == []
