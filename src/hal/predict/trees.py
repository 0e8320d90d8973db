"""``Trees``: a trained LightGBM model's predictions through LightGBM's C API.

``lightgbm.Booster.predict`` costs tens to hundreds of microseconds per call whatever
the number of rows (argument checks, type tests for pandas and scipy, a fresh predictor
object each call), and each call leaves two ``ctypes.cast`` results in reference cycles
(a pointer and the dict that keeps its source alive). The learned predictor asks for one
job at a time, several times per finished job, and the simulator replays with the cyclic
garbage collector off, so those cycles piled up for the whole replay (about 1 MB per
1,000 jobs; more where each pass predicts a long queue). Here one row costs a call of
LightGBM's single-row API (``LGBM_BoosterPredictForMatSingleRowFast``, a few
microseconds) and many rows one ``LGBM_BoosterPredictForMat``, with pointers that make no
cycle. The answers are the booster's own (the same C++ predictor, raw scores: the L1
objective has no output transform).

Where the C library is not reachable as ``lightgbm.basic._LIB`` (another lightgbm), the
booster's own ``predict`` answers instead.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

_FLOAT64 = 1  # C_API_DTYPE_FLOAT64
_NORMAL = 0  # C_API_PREDICT_NORMAL
_ROW_MAJOR = 1
_PARAMETERS = b"num_threads=1"

FloatArray = npt.NDArray[np.float64]


class Trees:
    def __init__(self, lgb: Any, booster: Any) -> None:
        self.booster = booster
        self.columns = int(booster.num_feature())
        self._out = np.empty(1, dtype=np.float64)
        self._lib: Any = getattr(getattr(lgb, "basic", None), "_LIB", None)
        self._error: type[Exception] = getattr(lgb.basic, "LightGBMError", RuntimeError)
        self._handle: Any = getattr(booster, "_handle", None)
        self._fast = ctypes.c_void_p()
        if self._lib is None or self._handle is None:
            self._lib = None
            return
        self._check(
            self._lib.LGBM_BoosterPredictForMatSingleRowFastInit(
                self._handle,
                ctypes.c_int(_NORMAL),
                ctypes.c_int(0),  # start iteration
                ctypes.c_int(-1),  # every iteration
                ctypes.c_int(_FLOAT64),
                ctypes.c_int32(self.columns),
                ctypes.c_char_p(_PARAMETERS),
                ctypes.byref(self._fast),
            )
        )
        # freed with this object; the booster it reads is kept until then
        weakref.finalize(self, _free, self._lib, self._fast, booster)

    def _check(self, code: int) -> None:
        if code != 0:
            assert self._lib is not None
            raise self._error(self._lib.LGBM_GetLastError().decode("utf-8"))

    def one(self, row: FloatArray) -> float:
        """The prediction for one row (float64, ``columns`` values)."""
        lib = self._lib
        if lib is None:
            return float(self.booster.predict(row[None, :], num_threads=1)[0])
        data = np.ascontiguousarray(row, dtype=np.float64)
        if data.shape != (self.columns,):  # (the C call reads ``columns`` values)
            raise ValueError(f"a row of {self.columns} features, not {data.shape}")
        out, length = self._out, ctypes.c_int64(0)
        self._check(
            lib.LGBM_BoosterPredictForMatSingleRowFast(
                self._fast,
                ctypes.c_void_p(data.ctypes.data),
                ctypes.byref(length),
                ctypes.c_void_p(out.ctypes.data),
            )
        )
        return float(out[0])

    def many(self, rows: FloatArray) -> FloatArray:
        """The predictions for the rows of a 2-D array (float64, ``columns`` wide)."""
        lib = self._lib
        if lib is None or len(rows) == 0:
            return np.asarray(self.booster.predict(rows, num_threads=1), dtype=np.float64)
        data = np.ascontiguousarray(rows, dtype=np.float64)
        out = np.empty(len(data), dtype=np.float64)
        length = ctypes.c_int64(0)
        self._check(
            lib.LGBM_BoosterPredictForMat(
                self._handle,
                ctypes.c_void_p(data.ctypes.data),
                ctypes.c_int(_FLOAT64),
                ctypes.c_int32(data.shape[0]),
                ctypes.c_int32(data.shape[1]),
                ctypes.c_int(_ROW_MAJOR),
                ctypes.c_int(_NORMAL),
                ctypes.c_int(0),
                ctypes.c_int(-1),
                ctypes.c_char_p(_PARAMETERS),
                ctypes.byref(length),
                ctypes.c_void_p(out.ctypes.data),
            )
        )
        if length.value != len(data):
            raise self._error(f"LightGBM gave {length.value} predictions for {len(data)} rows")
        return out


def _free(lib: Any, fast: ctypes.c_void_p, booster: Any) -> None:
    """Frees the single-row predictor of ``booster`` (kept alive until now)."""
    lib.LGBM_FastConfigFree(fast)
