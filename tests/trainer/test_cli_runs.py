"""`grappa train` run twice in one run directory, watched from outside (issue 27, items 2, 6, 7):
a rerun resumes only the same run; outputs say what happened; local ports listen on loopback."""
import contextlib
import io
import ipaddress
import json
import shutil
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from grappa.app.cli import main

P = 2


def free_base_port(count: int) -> int:
    """A port p with p .. p + count - 1 free on every interface (metrics use base + rank)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65535:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for p in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range")


def listening(pids: list[int]) -> set[tuple[str, int]]:
    out = set()
    for pid in pids:
        try:
            for c in psutil.Process(pid).net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((c.laddr.ip, c.laddr.port))
        except psutil.Error:  # exited meanwhile
            pass
    return out


def listening_on(ports: set[int]) -> set[tuple[str, int]]:
    """Every socket of this machine listening on one of `ports`, by the kernel's own tables (one
    read each, so a short-lived rank's is seen too: scanning each rank's sockets takes longer)."""
    out = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if state != "0A" or int(port, 16) not in ports:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr)  # each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out.add((str(ipaddress.ip_address(raw)), int(port, 16)))
    return out


def train(argv: list[str], run_dir: Path, watch: bool = False, ports: set[int] = frozenset()) -> dict:
    """main(["train", ...]) with its output captured (not a terminal, as in a pod's log), and
    while it runs the listening sockets of its ranks (pids.json) and any on `ports`."""
    out, err, result, seen = io.StringIO(), io.StringIO(), {}, set()

    def run() -> None:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result["rc"] = main(argv)

    t = threading.Thread(target=run)
    t.start()
    while t.is_alive():
        pids = run_dir / "pids.json"
        if watch:
            seen |= listening_on(set(ports))
        if watch and pids.is_file():
            try:
                seen |= listening([int(p) for p in json.loads(pids.read_text()).values()])
            except ValueError:  # being written
                pass
        time.sleep(0.01)
    t.join()
    return {"rc": result.get("rc"), "out": out.getvalue(), "err": err.getvalue(), "listening": seen}


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    run = tmp / "run"
    port = free_base_port(P + 1)
    argv = ["train", "--dataset", "csbm", "--set", "dataset.synthetic.numNodes=400", "--partitions", str(P),
            "--hidden", "16", "--epochs", "4", "--checkpoint-interval", "2", "--run-dir", str(run),
            "--store-dir", str(tmp / "store"), "--metrics-port", str(port)]
    res = train(argv, run, watch=True, ports={port + r for r in range(P + 1)})  # every rank's metrics
    assert res["rc"] == 0, res["err"][-3000:]
    return {**res, "argv": argv, "run": run, "tmp": tmp, "port": port}


def copy_of(first, name: str) -> tuple[Path, list[str]]:
    """The first run in a folder of its own, and its command pointed there."""
    run = first["tmp"] / name
    shutil.copytree(first["run"], run)
    argv = [str(run) if a == str(first["run"]) else a for a in first["argv"]]
    return run, argv


def test_a_local_run_listens_on_loopback_only(first):
    """Rendezvous store, gloo pairs and every rank's metrics port: 127.0.0.1, never 0.0.0.0."""
    ports = {p for _, p in first["listening"]}
    assert {first["port"] + r for r in range(P + 1)} <= ports, first["listening"]
    assert {ip for ip, _ in first["listening"]} == {"127.0.0.1"}, first["listening"]


def test_progress_off_a_terminal_is_lines_not_carriage_returns(first):
    err = first["err"]
    assert "\r" not in err
    epoch_lines = [x for x in err.splitlines() if x.startswith("epochs: ")]
    assert epoch_lines[-1].startswith("epochs: 4/4 ep (100%)") and len(epoch_lines) <= 4


@pytest.mark.parametrize("change,named", [
    (["--set", "grappa.shrinkage=0.9", "--epochs", "2"],
     ["grappa.shrinkage: 0.5 in the run, 0.9 now", "training.epochs: 4 in the run, 2 now"]),
    (["--arch", "sage"], ['model.arch: "gcn" in the run, "sage" now']),
    (["--set", "dataset.synthetic.numNodes=500"], ["dataset.synthetic.numNodes: 400 in the run, 500 now"]),
])
def test_a_rerun_with_other_settings_is_refused_naming_each_field(first, capsys, change, named):
    run = first["run"]
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert main(first["argv"] + change) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("grappa: error: run directory")
    for text in named:
        assert text in err
    assert "--run-dir" in err and "--start-over" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # untouched


def test_where_things_go_may_change_between_reruns(first, tmp_path):
    from grappa.app.cli import build_parser, config_from_args
    from grappa.app.rerun import check_rerun, saved_config
    assert saved_config(first["run"]) is not None
    argv = first["argv"] + ["--metrics-port", "0", "--checkpoint-interval", "1", "--store-dir",
                            str(tmp_path), "--data-root", str(tmp_path), "--epochs", "9"]
    check_rerun(config_from_args(build_parser().parse_args(argv)))  # raises if refused


def test_more_epochs_extend_the_run_and_the_plot_marks_resume_and_best(first):
    from grappa.app.report import history_figure
    run, argv = copy_of(first, "extended")
    res = train(argv + ["--epochs", "6"], run)
    assert res["rc"] == 0, res["err"][-3000:]
    report = json.loads((run / "report.json").read_text())
    assert report["epochs"] == 6 and report["resumed_at"] == [4]
    assert report["evaluation"] == "exact evaluation"
    fig = history_figure(report["history"], None, report["evaluation"], report["result"]["best_epoch"],
                         report["resumed_at"])
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert "resumed from a checkpoint" in labels
    assert any(x.startswith("best val ") and f"(epoch {report['result']['best_epoch']}" in x for x in labels)


def test_start_over_trains_the_new_settings_from_scratch(first):
    run, argv = copy_of(first, "restarted")
    res = train(argv + ["--arch", "sage", "--start-over"], run)
    assert res["rc"] == 0, res["err"][-3000:]
    assert "--start-over: removed checkpoints, metrics.jsonl, report.json" in res["err"]
    report = json.loads((run / "report.json").read_text())
    assert report["config"]["model"]["arch"] == "sage"
    assert report["epochs"] == 4 and report["resumed_at"] == []


def test_sampled_evaluation_is_labelled_as_such(tmp_path):
    from grappa.app.report import history_figure, write_report
    history = [{"epoch": e, "loss": 1.0 / e, "round": 0, "train_acc": 0.5, "val_acc": 0.4 + e / 100,
                "test_acc": 0.4} for e in range(1, 6)]
    config = {"training": {"mode": "mini-batch", "evalFraction": 0.1}}
    report = json.loads(write_report(tmp_path, config, history, {"best_epoch": 5}).read_text())
    assert report["evaluation"] == "sampled evaluation, 10% of nodes"
    fig = history_figure(history, None, report["evaluation"], 5, [])
    assert fig.axes[1].get_ylabel() == "accuracy (sampled evaluation, 10% of nodes)"


def test_line_progress_prints_a_line_per_five_percent():
    from grappa.util.progress_bar import progress_bar
    buf = io.StringIO()
    with progress_bar(1000, "epochs", "ep", file=buf) as bar:
        for _ in range(1000):
            bar.update(1)
    lines = buf.getvalue().splitlines()
    assert "\r" not in buf.getvalue() and len(lines) == 21  # 0 %, 5 %, ..., 100 %
    assert lines[-1].startswith("epochs: 1,000/1,000 ep (100%)")


def test_a_finished_run_without_checkpoints_is_compared_by_its_report(tmp_path, capsys):
    """checkpoint.interval 0 keeps no checkpoint: report.json still says what the run was."""
    from grappa.config import TrainConfig
    run = tmp_path / "run"
    run.mkdir()
    config = json.loads(TrainConfig(run_dir=str(run)).model_dump_json(by_alias=True))
    (run / "report.json").write_text(json.dumps({"config": config, "history": []}))
    assert main(["train", "--run-dir", str(run), "--arch", "sage"]) == 2
    assert 'model.arch: "gcn" in the run, "sage" now' in capsys.readouterr().err


# -- issue 35: a finished run is known as finished; what happens before epoch 1 is said --------

def test_the_launcher_says_what_runs_before_epoch_1_and_leaves_no_pids_file(first):
    """The seconds before epoch 1 (processes loading torch, meeting, building the model and the
    local graphs) are announced as they pass, instead of silence; pids.json lives as long as the
    processes do."""
    err = first["err"]
    epoch_1 = err.index("epochs: 1/4")
    for words in ("started the aggregator and 2 workers", "all 3 processes started and joined after",
                  "round 0 built after"):
        assert -1 < err.find(words) < epoch_1, err[:epoch_1]
    assert not (first["run"] / "pids.json").exists()


def test_ranks_do_not_import_pyg(tmp_path):
    """PyG (and torch._dynamo with it) cost each rank seconds of the start-up; no rank needs it."""
    import subprocess
    import sys
    code = ("import sys; import grappa.app.roles, grappa.runtime.aggregator, grappa.runtime.worker, "
            "grappa.runtime.stages, grappa.strategies, grappa.runtime.exact_eval; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch_geometric'))")
    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout


def test_a_rerun_of_a_finished_run_says_so_and_starts_nothing(first):
    run, argv = copy_of(first, "again")
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    res = train(argv, run)
    assert res["rc"] == 0, res["err"][-3000:]
    assert f"{run} holds this run, finished (4 epochs): nothing to train" in res["err"], res["err"]
    assert "final test accuracy" in res["out"]
    assert "started the aggregator" not in res["err"]  # no process started
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before


def test_epochs_past_the_last_periodic_checkpoint_are_kept_and_an_extension_repeats_none(tmp_path):
    """3 epochs with a checkpoint every 2: the last epoch is written too, so extending to 5
    resumes after epoch 3 (it redid epoch 3 and recorded it twice before)."""
    run = tmp_path / "run"
    argv = ["train", "--dataset", "csbm", "--set", "dataset.synthetic.numNodes=400", "--partitions", "2",
            "--hidden", "16", "--epochs", "3", "--checkpoint-interval", "2", "--run-dir", str(run),
            "--store-dir", str(tmp_path / "store")]
    assert train(argv, run)["rc"] == 0
    assert (run / "checkpoints" / "epoch-000003.pt").is_file()
    res = train(argv[:-6] + ["--epochs", "5"] + argv[-6:], run)
    assert res["rc"] == 0, res["err"][-3000:]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines if "event" not in x] == [1, 2, 3, 4, 5]
    assert json.loads((run / "report.json").read_text())["resumed_at"] == [3]


def test_start_over_removes_the_old_models_predictions_and_evaluation(first):
    run, argv = copy_of(first, "predicted")
    predict = ["--model", str(run / "model.pt"), "--partitions", "2", "--quiet"]
    assert main(["predict", *predict]) == 0 and main(["evaluate", *predict]) == 0
    (run / "evaluation" / "notes.txt").write_text("mine")  # a folder holding a user's file stays
    res = train(argv + ["--arch", "sage", "--start-over"], run)
    assert res["rc"] == 0, res["err"][-3000:]
    assert "predictions/" in res["err"] and not (run / "predictions").exists()
    assert (run / "evaluation" / "notes.txt").read_text() == "mine"
    assert main(["predict", *predict]) == 0  # the new model's, not "already holds finished predictions"
    manifest = json.loads((run / "predictions" / "manifest.json").read_text())
    assert manifest["model"]["arch"] == "sage"


def test_a_run_from_before_a_setting_existed_is_the_same_run(tmp_path):
    """A rerun after an upgrade that added a config field: the run had the field's default."""
    from grappa.app.rerun import check_rerun
    from grappa.config import TrainConfig
    run = tmp_path / "run"
    run.mkdir()
    cfg = TrainConfig(run_dir=str(run))
    config = json.loads(cfg.model_dump_json(by_alias=True))
    del config["training"]["evalFraction"], config["grappa"]["rounds"]["pairing"]  # not there yet
    (run / "report.json").write_text(json.dumps({"config": config, "history": [], "epochs": 100,
                                                 "result": {}}))
    assert check_rerun(cfg) is not None  # finished, not "null in the run"
    changed = cfg.model_copy(update={"training": cfg.training.model_copy(update={"eval_fraction": 0.5})})
    with pytest.raises(Exception, match=r"training.evalFraction: 1.0 in the run, 0.5 now"):
        check_rerun(changed)


def single(run: Path, *extra: str) -> list[str]:
    return ["single", "--dataset", "csbm", "--set", "dataset.synthetic.numNodes=300", "--epochs", "2",
            "--hidden", "8", "--run-dir", str(run), *extra]


def test_grappa_single_reruns_like_train(tmp_path, capsys):
    """`grappa single` had no rerun check: a SAGE run replaced a GCN model and appended to its
    metrics. Now the same run finished is said, another refused (or --start-over), and a
    single run and a train run never share a run directory."""
    run = tmp_path / "run"
    assert main(single(run)) == 0
    metrics, model = (run / "metrics.jsonl").read_bytes(), (run / "model.pt").read_bytes()
    capsys.readouterr()
    assert main(single(run)) == 0
    assert "holds this run, finished (2 epochs)" in capsys.readouterr().err
    assert main(single(run, "--arch", "sage")) == 2
    assert 'model.arch: "gcn" in the run, "sage" now' in capsys.readouterr().err
    assert main(single(run, "--epochs", "3")) == 2  # nothing to extend: no checkpoint
    assert "training.epochs: 2 in the run, 3 now" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_bytes() == metrics and (run / "model.pt").read_bytes() == model
    assert main(["train", *single(run)[1:]]) == 2
    assert "holds a `grappa single` run" in capsys.readouterr().err
    assert main(single(run, "--arch", "sage", "--start-over")) == 0
    assert json.loads((run / "report.json").read_text())["config"]["model"]["arch"] == "sage"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("command", ["train", "single"])
def test_a_run_directory_holding_other_files_is_refused_before_anything_is_written(tmp_path, capsys, command):
    run = tmp_path / "project"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    (run / "data.csv").write_text("1,2")
    assert main([command, "--run-dir", str(run), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "holds files that are not a run's (data.csv, notes.txt)" in err and "--run-dir" in err, err
    assert sorted(p.name for p in run.iterdir()) == ["data.csv", "notes.txt"]
