"""gpusleuth's entry point into a job's Python processes (standard library only, Python 3.8+).

`gpusleuth run` puts this directory first on the child's PYTHONPATH, so Python's `site` module imports
this file at start-up in every Python process of the job — that is how we instrument a training script
without changing its code. Two duties, in this order:

1. If ``GPUSLEUTH_RUN_DIR`` is set, activate the hook (`_gpusleuth_autohook`). Without it we do nothing,
   so leaving this directory on a PYTHONPATH by accident costs nothing.
2. Run the ``sitecustomize`` we shadow. Virtual environments, distributions and users ship their own;
   being first on the path hides theirs, so we find the next one on ``sys.path`` and execute it under the
   name ``sitecustomize``, exactly as `site` would have. Its exceptions propagate unchanged so that `site`
   reports them the way it always does: the user's environment behaves as if we were not here.
"""


def _gpusleuth_activate():
    import os

    if not os.environ.get("GPUSLEUTH_RUN_DIR"):
        return
    try:
        import _gpusleuth_autohook

        _gpusleuth_autohook.activate()
    except Exception:  # never break a user's interpreter start-up because of us
        pass


def _gpusleuth_chain():
    import os
    import sys
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.dirname(os.path.realpath(__file__))
    others = []
    for entry in sys.path:
        try:
            if os.path.realpath(entry or os.curdir) == here:
                continue
        except (TypeError, ValueError, OSError):
            continue
        others.append(entry)
    spec = PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_gpusleuth_activate()
_gpusleuth_chain()
