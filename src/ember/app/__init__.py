"""The ember application: the ``ember`` command (demo, digits, summary, plot).

The library never imports this package.
"""
