"""Retrieval quality on BEIR-format datasets: ``rifflux eval``.

``metrics`` holds the ranking metrics (pure functions), ``beir`` reads a dataset and
materialises its corpus as markdown files in a cache directory, ``runner`` indexes that
directory through the real pipeline and scores every mode, ``cli`` is the command.
"""
