"""Simulated runtime: roofline step costs, hardware presets and calibration profiles."""
