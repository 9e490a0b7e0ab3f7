"""Shared test helpers: fakes, wait helpers, process runners, template renderers, mTLS and load helpers.

Test modules import these as ``from helpers.<module> import ...`` (pytest puts ``tests/`` on the path:
``pythonpath`` in pyproject.toml). Fixtures live in the ``conftest.py`` of the folder that uses them;
nothing imports ``conftest`` or another test module by name.
"""
