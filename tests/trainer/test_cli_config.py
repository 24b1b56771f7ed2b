"""Settings as a user writes them (issue 27, items 1 and 4): every example file with every flag
and every field on top, in either spelling; YAML mistakes as one line naming the file and line."""
import argparse
import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from grappa.app.cli import FLAGS, add_config_flags, config_from_args, main
from grappa.config import ConfigError, Section, TrainConfig, load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
IDS = [p.name for p in EXAMPLES]

# One valid value per flag, different from every example's, and valid on all of them together
# with their own settings (the rmat examples are mini-batch with three fanouts).
FLAG_VALUES = {
    "strategy": "grappa", "partitions": 6, "dataset": "csbm", "data_root": "/data/elsewhere",
    "download": True, "arch": "gat", "layers": 3, "hidden": 48, "dropout": 0.25,
    "mode": "mini-batch", "epochs": 7, "batch_size": 77, "lr": 0.05, "seed": 3, "eval_every": 3,
    "correction": "batch", "shrinkage": 0.9, "chunks": 12, "partition_seed": 5, "rounds_every": 4,
    "pairing": "random", "checkpoint_interval": 3, "run_dir": "runs/elsewhere",
    "store_dir": "stores/elsewhere", "metrics_port": 9999, "feature_dtype": "float16",
    "block_edges": 2048, "prepare_workers": 2,
}


def parse(*argv: str) -> TrainConfig:
    p = argparse.ArgumentParser()
    add_config_flags(p)
    return config_from_args(p.parse_args(list(argv)))


def field_value(cfg: BaseModel, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_every_flag_has_a_value_here():
    assert set(FLAG_VALUES) == set(FLAGS)


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_every_flag_on_top_of_every_example(path, flag):
    value = FLAG_VALUES[flag]
    argv = ["--config", str(path), "--" + flag.replace("_", "-")]
    if value is not True:
        argv.append(str(value))
    own = load_config(str(path)).dataset.name
    if flag == "dataset" and own in ("arrays", "tables"):
        # another dataset on top of a user format's settings: refused, naming them and the fix
        with pytest.raises(ConfigError, match=f"dataset.{own} applies to dataset.name '{own}' only"):
            parse(*argv)
        return
    cfg = parse(*argv)
    assert field_value(cfg, FLAGS[flag][0]) == value


def leaves(model: type[BaseModel], prefix: tuple = ()) -> list[tuple[tuple, object]]:
    """Every leaf field as (((snake, camel) per level), its default)."""
    out = []
    for name, f in model.model_fields.items():
        here = prefix + ((name, f.alias or name),)
        sub = next((c for c in (f.annotation, *getattr(f.annotation, "__args__", ()))
                    if isinstance(c, type) and issubclass(c, Section)), None)
        out += leaves(sub, here) if sub else [(here, f.get_default(call_default_factory=True))]
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
@pytest.mark.parametrize("spelling", ["snake_case", "camelCase"])
def test_every_field_with_set_on_top_of_every_example(path, spelling):
    """`--set` of every field, spelled either way, over a file that spells it camelCase: the
    value lands on the one field (here the file's own value, which is valid by construction)."""
    base = load_config(str(path))
    failures = []
    for levels, default in leaves(TrainConfig):
        snake = ".".join(s for s, _ in levels)
        key = snake if spelling == "snake_case" else ".".join(c for _, c in levels)
        try:
            value = field_value(base, snake)
        except AttributeError:  # inside an optional section the example leaves out
            value = default
        text = json.dumps(value)
        try:
            cfg = parse("--config", str(path), "--set", f"{key}={text}")
        except Exception as err:  # noqa: BLE001 - collect them all, report together
            failures.append(f"--set {key}={text}: {err}")
            continue
        if field_value(cfg, snake) != value:
            failures.append(f"--set {key}={text} gave {field_value(cfg, snake)!r}")
    assert not failures, "\n".join(failures)


def test_set_on_top_of_a_file_value_wins_in_either_spelling():
    cora = str(EXAMPLES[[p.name for p in EXAMPLES].index("cora.yaml")])
    assert parse("--config", cora, "--set", "training.eval_every=4").training.eval_every == 4
    assert parse("--config", cora, "--set", "training.evalEvery=5").training.eval_every == 5
    assert parse("--config", cora, "--eval-every", "6").training.eval_every == 6
    assert parse("--config", cora, "--set", "grappa.rounds={every: 3}").grappa.rounds.every == 3


def test_both_spellings_of_one_field_in_one_file_are_refused(tmp_path, capsys):
    f = tmp_path / "twice.yaml"
    f.write_text("training:\n  evalEvery: 2\n  eval_every: 3\n")
    assert main(["prepare", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert "training.evalEvery and training.eval_every are the same setting" in err


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("grappa: error: "), err
    return lines[0]


def test_yaml_syntax_error_in_the_file_names_file_and_line(tmp_path, capsys):
    f = tmp_path / "broken.yaml"
    f.write_text("partitions: 2\ntraining:\n  epochs: [1, 2\n  lr: 0.1\n")
    assert main(["train", "--config", str(f), "--run-dir", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{f}, line " in line and "not valid YAML" in line and "fix the file" in line
    assert not (tmp_path / "run").exists()  # nothing written


def test_yaml_syntax_error_in_set_names_the_flag(tmp_path, capsys):
    assert main(["train", "--set", "training.fanouts=[15, 10", "--run-dir", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--set 'training.fanouts=[15, 10'" in line and "quote it" in line


def test_a_config_file_that_is_not_a_mapping(tmp_path, capsys):
    f = tmp_path / "list.yaml"
    f.write_text("- partitions: 2\n")
    assert main(["prepare", "--config", str(f)]) == 2
    assert "expected a mapping at the top level" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("typo,meant", [("trainig.epochs=3", "did you mean training?"),
                                        ("model.hiden=3", "did you mean model.hidden?"),
                                        ("dataset.synthetic.num_node=9", "did you mean dataset.synthetic.numNodes?")])
def test_a_misspelt_field_gets_a_did_you_mean(tmp_path, capsys, typo, meant):
    assert main(["prepare", "--set", typo, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert meant in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["[15, 10", "[*.npy, e2.npy]", "[a.npy, !b.npy]"])
def test_the_advice_for_a_list_in_set_is_a_set_that_works(tmp_path, capsys, value):
    """The fix a bad list value is given, pasted back as the shell would pass it, is a list the
    field takes (quoting the whole value, as advised before, made it a string the field refuses)."""
    import shlex
    field = "training.fanouts" if value[1].isdigit() else "dataset.arrays.edges"
    assert main(["prepare", "--set", f"{field}={value}", "--run-dir", str(tmp_path / "r")]) == 2
    line = one_error_line(capsys.readouterr().err)
    advice = shlex.split(line.rsplit("--set ", 1)[1])[0]
    assert advice.startswith(f"{field}=["), line
    from grappa.app.cli import build_parser, config_from_args
    extra = [] if field == "training.fanouts" else ["--dataset", "arrays", "--set", "dataset.path=g"]
    cfg = config_from_args(build_parser().parse_args(["prepare", "--set", advice, "--layers", "2", *extra]))
    got = cfg.training.fanouts if field == "training.fanouts" else cfg.dataset.arrays.edges
    assert isinstance(got, list) and len(got) == 2, got
