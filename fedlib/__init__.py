"""fedlib: the small PyTorch core of the PSI-PFL reproducibility workbook.

Modules: datasets, partition, noniid, clustering, models, engine, methods,
evaluation, experiment, plots.
"""

__version__ = "0.1.0"

if "ipykernel" in __import__("sys").modules:  # a notebook: papermill's unknown parameters are errors
    from .notebook_params import check_injected

    check_injected()
    del check_injected
