"""The browser console: a single page, its assets, and the routes that serve them."""
