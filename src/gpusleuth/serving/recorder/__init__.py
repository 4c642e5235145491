"""Serving, recorder stage: ``gpusleuth load``'s generator and the engine scrape beside it."""
