"""Parley's tests.

Fixtures live in ``conftest.py`` files: the one in the folder whose tests use them, or this
folder's when tests of several folders do; pytest hands them to a test by argument name.
Everything else a test shares (fakes, builders, constants) is a plain module of
``tests.support``, imported as ``from tests.support.<module> import ...``.
"""
