"""The optional C kernels (``ckptctl._ckernels``); everything else is in pyproject.toml.

``optional=True``: where no C compiler works, the build leaves the extension out and ckptctl
uses its numpy kernels (docs/development.md).
"""

import sys

from setuptools import Extension, setup

# -fno-trapping-math: the loops vectorise (their selects need not guard a NaN's flags, which the
# kernels restore anyway); no option that changes a result (no -ffast-math: subnormals count)
flags = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-fno-trapping-math"]
setup(
    ext_modules=[
        Extension(
            "ckptctl._ckernels",
            ["ckptctl/_ckernels.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
