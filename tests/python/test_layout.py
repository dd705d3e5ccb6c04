"""Every struct the package mirrors with ctypes has the C compiler's size and field offsets (tests/python/layout.c
prints them): a mismatch would make ctypes read and write the wrong bytes without any error."""
import ctypes
import json
import subprocess

from conftest import LAYOUT
from tokroute import _lib


def test_struct_layouts_match_the_header():
    c = json.loads(subprocess.run([str(LAYOUT)], capture_output=True, text=True, check=True).stdout)
    assert set(c) == set(_lib.STRUCTS)
    for name, cls in _lib.STRUCTS.items():
        assert ctypes.sizeof(cls) == c[name]["size"], name
        py = {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}
        assert py == c[name]["fields"], name


def test_a_wrong_mirror_would_be_caught():
    """The comparison above can fail: a mirror with a field of the wrong width gets other offsets and size."""
    class Wrong(ctypes.Structure):
        _fields_ = [(n, ctypes.c_int64 if n == "temperature" else t) for n, t in _lib.SamplerParams._fields_]
    c = json.loads(subprocess.run([str(LAYOUT)], capture_output=True, text=True, check=True).stdout)
    assert ctypes.sizeof(Wrong) != c["tr_sampler_params"]["size"] or Wrong.top_k.offset != 4
