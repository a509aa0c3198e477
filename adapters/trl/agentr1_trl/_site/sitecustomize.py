"""Run at start-up by every Python process that :mod:`agentr1_trl` starts, directly or through vLLM, torch or
any other library (``agentr1_trl._companions`` puts this directory first on ``PYTHONPATH`` once it has hidden a
companion package that cannot load): the same packages are marked absent here, before anything imports
transformers. vLLM, for one, inspects a model's class in a ``python -m vllm.model_executor.models.registry``
subprocess that imports transformers. A ``sitecustomize`` of the user's own, shadowed by this one, runs after it.
"""

import importlib.util
import os
import sys
from importlib.machinery import PathFinder

for _name in filter(None, os.environ.get("AGENTR1_HIDDEN_COMPANIONS", "").split(",")):
    if _name not in sys.modules:
        sys.modules[_name] = None  # type: ignore[assignment]  (import raises ImportError, find_spec says None)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
