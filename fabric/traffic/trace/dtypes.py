"""Element sizes of the dtype spellings PyTorch traces use (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabric.traffic.trace.schema import TraceError

# element sizes by the dtype spellings of record_param_comms and of "Input type"
DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "c10::half": 2, "c10::bfloat16": 2,
    "int": 4, "long": 8, "long int": 8, "short": 2, "short int": 2, "byte": 1, "char": 1,
    "unsigned char": 1, "signed char": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}


def dtype_bytes(path: Path, index: int, dtype: Any) -> int:
    """Bytes of one element of ``dtype`` (a torch spelling)."""
    size = DTYPE_BYTES.get(str(dtype).strip().lower())
    if size is None:
        raise TraceError(f"{path.name}: event {index}: unknown element type {dtype!r}")
    return size
