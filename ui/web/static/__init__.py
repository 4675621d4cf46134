"""The browser console's page and assets (a package so that they install as package data)."""
