"""Execute the book's chapters with `seqmodels.execution_client`, whose waits on the kernel are sliced.

myst-nb (``execute_notebooks: cache``) runs each chapter in the Sphinx process through
jupyter-cache's ``single_nb_execution``, which calls ``nbclient.execute`` by the name it imported,
``jupyter_cache.executors.utils.executenb``. This extension rebinds that name to
`seqmodels.execution_client.execute`: the same `NotebookClient` with the same options (myst-nb's
timeout, allow_errors, the temporary folder), plus sliced polls, so a reply or idle status the
event loop was not woken for is read within half a second instead of at the cell's 300 s timeout
(`seqmodels.execution_client` says why). Set up from ``notebooks.py``.
"""

from __future__ import annotations


def use_sliced_client() -> None:
    """Make jupyter-cache's notebook execution use `seqmodels.execution_client.execute`."""
    from jupyter_cache.executors import utils

    from seqmodels.execution_client import execute

    utils.executenb = execute


def setup(app) -> dict:
    use_sliced_client()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
