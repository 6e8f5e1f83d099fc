"""``python -m onnx_lab.cli``: the ``onnx-lab`` command."""

from __future__ import annotations

import sys

from onnx_lab.cli import main

sys.exit(main())
