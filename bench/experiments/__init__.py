"""Experiments that are not served and not tested: each runs by hand; README.md gives its status."""
