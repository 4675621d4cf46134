"""One runtime over several named models (``serve`` with a ``models`` list): ``runtime.py``
dispatches each call to the engine of the model intake chose and remembers which engine holds
each call and each program's context; ``merge.py`` sums what the engines show the server;
``build.py`` starts one engine per served model."""
