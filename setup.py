"""The optional compiled line reader of the SGLang parser (parsers/sglang/_linescan.c).

Everything else about the package is in pyproject.toml. ``optional=True``: where no C compiler
or Python headers are found, the build goes on without it and the parser runs its pure path,
which gives the same rows (parsers/sglang/native.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "forensics_parsers.sglang._linescan",
            ["parsers/sglang/_linescan.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        )
    ]
)
