"""The live service: programs, calls, tools and events orchestrated in wall-clock time."""
