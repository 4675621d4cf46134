"""Calibration profiles (JSON), one per GPU x model x tensor-parallel preset."""
