"""The optional compiled part of gpusleuth: the trace reader's column scanner (sources/kineto/_scan.c).

Everything else is in pyproject.toml. ``optional=True``: where no C compiler is available the build of the
extension is skipped with a warning and the install succeeds; the reader then uses its pure-Python path
(sources/kineto/fastscan.py), which gives the same answers.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gpusleuth.sources.kineto._scan", ["src/gpusleuth/sources/kineto/_scan.c"],
                             optional=True)])
