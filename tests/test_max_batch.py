"""The largest batch that fits, against planted memory ceilings: exact, with state restored between tries."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from conftest import gpusleuth
from gpusleuth.experiments.maxbatch import Try, find_max_batch, search


@pytest.mark.parametrize("ceiling", [1, 2, 37, 64, 100, 4095])
def test_search_finds_the_ceiling_exactly(ceiling):
    tried = []

    def try_batch(b):
        tried.append(b)
        return Try(b, fits=b <= ceiling, oom=b > ceiling, seconds=0.0)

    res = search(try_batch, 1, 4096)
    assert res.max_batch == ceiling and res.first_oom == ceiling + 1
    assert len(tried) == len(set(tried)) <= 2 * 12 + 1  # doubling then bisection: ~2·log2(range)


def test_search_reports_the_upper_bound_and_the_lower_failure():
    res = search(lambda b: Try(b, True, False, 0.0), 8, 100)
    assert res.max_batch == 100 and res.first_oom is None and "upper bound" in res.text
    res = search(lambda b: Try(b, False, True, 0.0), 8, 100)
    assert res.max_batch is None and res.first_oom == 8 and "even batch 8" in res.text


def test_search_stops_on_a_failure_that_is_not_memory():
    def try_batch(b):
        if b >= 16:
            return Try(b, False, False, 0.0, "ValueError: shapes do not match")
        return Try(b, True, False, 0.0)

    res = search(try_batch, 1, 1024)
    assert res.max_batch == 8 and res.stopped and "shapes do not match" in res.stopped


@pytest.mark.parametrize("make_error", [
    lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    lambda: RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.1 GiB total capacity)"),
    lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
    lambda: MemoryError(),
])
@pytest.mark.process
def test_in_process_search_with_a_planted_ceiling_restores_state(make_error):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ceiling = 37
    seen = []

    def step(b):
        seen.append(b)
        x = torch.randn(b, 8)
        model(x).pow(2).mean().backward()
        opt.step()  # the try changes the weights and creates Adam state …
        if b > ceiling:
            raise make_error()  # … and then runs out of memory, as a real step would part-way

    res = find_max_batch(step, 1, 1024, state=(model, opt))
    assert res.max_batch == ceiling and res.first_oom == ceiling + 1
    for k, v in model.state_dict().items():  # every try started from, and ended at, the same state
        assert torch.equal(v, before[k])
    assert opt.state_dict()["state"] == {}
    assert all(p.grad is None for p in model.parameters())
    assert all(t.oom for t in res.tries if not t.fits)


@pytest.mark.slow
def test_cli_max_batch_with_a_planted_ceiling_in_a_child_process(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "import sys\n"
        "b = int(sys.argv[1])\n"
        "if b > 37:\n"
        "    sys.stderr.write('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB\\n')\n"
        "    sys.exit(1)\n"
        "print('batch', b, 'fits')\n"
    )
    res = gpusleuth("sweep", "--max-batch", "--batch-range", "16:64", "--out", tmp_path / "mb", "--json", "--",
                    sys.executable, job, "{batch_size}", cwd=tmp_path, timeout=170)
    assert res.returncode == 0, res.stderr
    mb = json.loads(res.stdout)["max_batch"]
    assert mb["max_batch"] == 37 and mb["first_oom"] == 38
    assert [t["batch"] for t in mb["tries"]] == [16, 32, 64, 48, 40, 36, 38, 37]
    assert all(t["oom"] for t in mb["tries"] if not t["fits"])
    human = gpusleuth("sweep", "--max-batch", "--batch-range", "36:38", "--out", tmp_path / "mb2", "--",
                      sys.executable, job, "{batch_size}", cwd=tmp_path, timeout=60)
    assert "largest batch that fits: 37" in human.stdout, human.stdout + human.stderr
