"""The package version, in a module of its own: any module may read it without importing
the package root (which imports the API, and so nearly everything)."""

__version__ = "0.1.0"
