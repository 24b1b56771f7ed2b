"""What a user's model code can get wrong, and what Grappa says: exit 3 within seconds, one line
naming the factory and the user's own line; a rank that cannot run tells the group."""
from __future__ import annotations

import pytest

from custom_model_helpers import MODELS, custom, error_line, train_cli
from grappa.config import ConfigError, validate_config
from grappa.models.build import build_model
from grappa.models.user_code import ModelCodeError


def test_a_factory_whose_module_does_not_import(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\n\nVALUE = 1\nimport no_such_module_anywhere  # the user's line\n")
    res = train_cli(tmp_path, "--factory", "broken:make", "--code-path", str(bad))
    line = error_line(res)
    assert res.returncode == 3
    assert "model.custom.factory broken:make" in line and f"{bad}, line 4" in line, line
    assert "No module named 'no_such_module_anywhere'" in line, line
    assert not (tmp_path / "run" / "logs").exists()  # refused before any process started


def test_a_factory_that_is_not_there(tmp_path):
    res = train_cli(tmp_path, "--factory", "pyg_models:make_stak", "--code-path", str(MODELS))
    line = error_line(res)
    assert res.returncode == 3 and "has no 'make_stak'" in line and "make_stack" in line, line
    res = train_cli(tmp_path, "--factory", "not_installed_models:make")
    line = error_line(res)
    assert res.returncode == 3 and "module not_installed_models is not among the installed packages" in line, line
    assert "codePath" in line


def test_a_forward_that_fails_on_the_first_batch(tmp_path):
    """It passes Grappa's check on a small graph, then fails in the workers' first step: the job
    ends with exit 3 and the worker's line, the factory and the user's line, not a group crash."""
    res = train_cli(tmp_path, "--factory", "pyg_models:make_failing", "--code-path", str(MODELS))
    line = error_line(res)
    assert res.returncode == 3, res.stderr[-2000:]
    assert "model.custom.factory pyg_models:make_failing" in line and "cannot take" in line, line
    assert f"{MODELS}, line" in line and "raise ValueError" in line and "worker" in line, line


def test_a_rank_that_cannot_run_tells_the_group():
    """A rank ending on a permanent error says so in the rendezvous store first: the ranks whose
    collective then fails end with its code and line (on Kubernetes, where no launcher stops
    them, the aggregator exits 3 too rather than 1, which the operator would restart)."""
    from datetime import timedelta

    import torch.distributed as dist

    from grappa.runtime.exit_codes import permanent_code
    from grappa.runtime.group import Group, PeerCannotRun
    master = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=10), wait_for_workers=False)
    peer = dist.TCPStore("127.0.0.1", master.port, 2, False, timedelta(seconds=10))
    aggregator, worker = Group(0, 2, master, 5.0), Group(1, 2, peer, 5.0)
    assert aggregator.peer_cannot_run() is None
    assert isinstance(aggregator.failure("step", RuntimeError("connection reset")), Exception)
    err = ModelCodeError("model.custom.factory m:f: the model's forward failed: ValueError: no")
    worker.cannot_run(permanent_code(err), str(err))
    relayed = aggregator.failure("step all-reduce", RuntimeError("connection reset by peer"))
    assert isinstance(relayed, PeerCannotRun) and relayed.exit_code == 3 and permanent_code(relayed) == 3
    assert str(relayed) == f"worker 0 (rank 1): {err}"


def test_a_model_that_breaks_grappas_check(tmp_path):
    res = train_cli(tmp_path, "--factory", "pyg_models:make_stack", "--code-path", str(MODELS),
                 "--set", "model.custom.kwargs={conv: nope}")
    line = error_line(res)
    assert res.returncode == 3 and "calling it with in_channels=" in line and "ValueError: nope" in line, line
    assert f"{MODELS}, line" in line, line


def test_strategies_that_need_the_builtin_layers_refuse_a_custom_model():
    for strategy in ("full", "varco", "retexo"):
        with pytest.raises(ConfigError) as err:
            validate_config({"strategy": strategy, "model": {"custom": {"factory": "my_models:make"}}})
        assert f"strategy '{strategy}' cannot train model.custom (factory my_models:make)" in str(err.value)
        assert "strategy grappa" in str(err.value)
    with pytest.raises(ConfigError, match="expected 'package.module:function'"):
        validate_config({"model": {"custom": {"factory": "my_models.make"}}})
    with pytest.raises(ConfigError, match="kwargs.in_channels is set by Grappa"):
        validate_config({"model": {"custom": {"factory": "m:f", "kwargs": {"in_channels": 3}}}})
    assert validate_config({"model": {"custom": {"factory": "m:f", "kwargs": {"num_layers": 3}}}}).model.layers == 3


def test_build_errors_name_the_factory(tmp_path):
    with pytest.raises(ModelCodeError, match="returned a int, not a torch.nn.Module"):
        (tmp_path / "ints.py").write_text("def make(in_channels, out_channels):\n    return 3\n")
        build_model(custom("ints:make", tmp_path / "ints.py"), 4, 2)
    with pytest.raises(ModelCodeError, match="codePath .* does not exist"):
        build_model(custom("ints:make", tmp_path / "nowhere.py"), 4, 2)
