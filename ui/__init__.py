"""Operator consoles: the Textual dashboard and the browser page."""
