"""The dashboard's views, one module each, plus its modal dialogs."""
