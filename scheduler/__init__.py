"""Program model, estimators, scheduling policies and the controller.

Imports nothing else of the project: the same code runs in the server, the simulator and
inside SGLang's scheduler process.
"""
