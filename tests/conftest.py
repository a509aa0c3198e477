"""Shared test setup: an isolated on-disk cache, offline settings."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("AGENTR1_CACHE", tempfile.mkdtemp(prefix="agentr1-test-cache-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
