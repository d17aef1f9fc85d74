"""The one compiled part: the Kineto traceEvents scanner (neurontrace/parsers/_kineto_scan.c).

``optional=True``: where no C compiler is present the package still installs, and the Kineto
parser uses its pure-Python decoder (same results, slower); see neurontrace/parsers/_kineto_json.py.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "neurontrace.parsers._kineto_scan",
            sources=["neurontrace/parsers/_kineto_scan.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
