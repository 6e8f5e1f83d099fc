"""Turning tables, graphs and numbers into HTML, SVG and figures (display formatting lives here)."""
