"""Report objects and their renderers."""
