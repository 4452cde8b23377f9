"""The compiled part of the package: kafkacompat/log/_record_walk.c (see kafkacompat/log/record_walk.py).

Everything else about the package is declared in pyproject.toml. pyproject's own `ext-modules` table
needs setuptools 74 or later (and is marked experimental there), and pyproject.toml's build requirement
is `setuptools>=68`, so the extension is declared here, the one thing setup.py does. It is `optional`:
without a C compiler (or Python's headers) `pip install` warns and goes on, and the broker walks records
in pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkacompat.log._record_walk",
            sources=["kafkacompat/log/_record_walk.c"],
            optional=True,
        )
    ]
)
