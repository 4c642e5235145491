"""The package version, in its own module so that any layer can read it without importing the package root
(which re-exports the API and so sits above every stage)."""

__version__ = "0.1.0"
