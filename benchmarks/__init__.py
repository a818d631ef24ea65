"""Benchmarks of inert, run by hand (``make bench``); not part of the test suite."""
