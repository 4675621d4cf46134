"""The HTTP API of API.md (Litestar controllers), except the tool gateway's and the consoles'
routes."""
