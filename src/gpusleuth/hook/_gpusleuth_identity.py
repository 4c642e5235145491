"""Who this process is in a distributed job, from its environment (standard library only, Python 3.8+).

Rank, local rank, world size, node rank, host and job id, from the variables that ``torchrun``/
``torch.distributed.run``, ``mp.spawn`` users, Slurm (``srun``) and Open MPI/PMI (``mpirun``) set. The
writer puts it in every process's ``H`` header (so every rank is known with zero code change) and
``_gpusleuth_dist`` adds it to the ``dist_init`` fact; a leaf, so that neither imports the other.
"""
import os
import socket

# (variable, meaning) in order of preference: the launcher's own names first, then the schedulers'
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_LOCAL_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_WORLD_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_NODE_VARS = ("GROUP_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_NODE_RANK")
_JOB_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_orte_jobid", "GPUSLEUTH_JOB_ID")


def _first_env(names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return None


def identity():
    """This process's place in the job, from the environment: what goes into the ``H`` header."""
    try:
        host = socket.gethostname()
    except OSError:
        host = None
    job = None
    for name in _JOB_VARS:
        if os.environ.get(name):
            job = os.environ[name]
            break
    return {"rank": _first_env(_RANK_VARS), "local_rank": _first_env(_LOCAL_VARS),
            "world_size": _first_env(_WORLD_VARS), "node_rank": _first_env(_NODE_VARS), "host": host,
            "job_id": job}
