"""bench/provenance.py: a job's code commit and date, and the recording commit given from git history
to jobs recorded before the stamp existed. Runs git in a scratch repository; nothing else."""
import json
import subprocess

import pytest

from bench_modules import load


@pytest.fixture(scope="module")
def prov():
    return load("provenance")


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("r\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def commit_runs(root, runs: dict, message: str) -> str:
    (root / "runs.json").write_text(json.dumps(runs, indent=1, sort_keys=True))
    git(root, "add", "runs.json")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "--short", "HEAD")


def test_stamp_names_the_commit_and_only_code_edits(prov, repo):
    head = git(repo, "rev-parse", "--short", "HEAD")
    s = prov.stamp(repo)
    assert (s["commit"], s["changes"]) == (head, False)
    (repo / "README.md").write_text("edited prose\n")  # not code: the commit still says what ran
    assert prov.stamp(repo)["changes"] is False
    (repo / "trainer" / "a.py").write_text("x = 2\n")
    assert prov.stamp(repo)["changes"] is True
    assert prov.describe([{"measured": prov.stamp(repo)}]).startswith(f"{head}+changes (")


def test_from_history_gives_the_commit_that_first_holds_each_record_as_it_is(prov, repo):
    first = commit_runs(repo, {"a": {"v": 1}}, "a")
    second = commit_runs(repo, {"a": {"v": 1}, "b": {"v": 2}}, "b")
    third = commit_runs(repo, {"a": {"v": 3}, "b": {"v": 2}}, "a measured again")
    runs = {"a": {"v": 3}, "b": {"v": 2}, "c": {"v": 4},
            "d": {"v": 5, "measured": {"date": "2026-01-01 00:00", "commit": "abc1234", "changes": False}}}
    assert prov.from_history(runs, repo / "runs.json", repo) == 2
    assert runs["a"]["measured"]["recorded_in"] == third   # not `first`: that record was replaced
    assert runs["b"]["measured"]["recorded_in"] == second
    assert "measured" not in runs["c"]                      # never committed: left unstamped
    assert runs["d"]["measured"]["commit"] == "abc1234"     # a stamp is never replaced
    assert first != third
    assert prov.describe([runs["b"], runs["b"], runs["c"], runs["d"]]) == \
        f"before {second} ({runs['b']['measured']['date']}), unrecorded, abc1234 (2026-01-01)"


def test_host_names_the_cpu_its_widest_vector_units_and_the_cores(prov):
    info = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
            "model name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma\n\n"
            "processor\t: 1\nmodel name\t: another\nflags\t\t: avx512f\n")
    h = prov.host(info)
    assert h["cpu"] == "AMD EPYC (family 25, model 1)" and h["simd"] == "avx2"  # the first processor's
    assert h["cores"] >= 1
    assert prov.host("processor : 0\nflags : sse2\n")["simd"] is None
    stamped = prov.stamp()["host"]
    assert stamped["cores"] == h["cores"] and stamped["kernel"] == h["kernel"] and h["kernel"]


def test_host_costs_count_the_faults_they_time(prov):
    costs = prov.host_costs(calls=2_000, pages=300)
    assert costs["page_faults"] >= 300  # one first touch a page at least: the faults were made
    assert costs["syscall_us"] >= 0 and costs["page_fault_us"] > 0


def test_hosts_table_one_row_a_host(prov):
    a = {"cpu": "EPYC", "simd": "avx2", "cores": 2, "kernel": "6.18-a", "syscall_us": 0.25, "page_fault_us": 3.5}
    b = {**a, "kernel": "6.18-b", "syscall_us": 0.1, "page_fault_us": 0.9}
    old = {"cpu": "EPYC", "simd": "avx2", "cores": 2}  # before the kernel and the costs were kept
    cells = [("x", [{"measured": {"host": a}}, {"measured": {"host": {**a, "syscall_us": 0.3}}}]),
             ("y", [{"measured": {"host": b}}, {"measured": {"host": old}}, {"measured": {"date": "d"}}])]
    md = prov.hosts_table(cells)
    assert md[2] == "| EPYC | avx2 | 2 | 6.18-a | 0.25-0.30 | 3.50 | x |"
    assert md[3] == "| EPYC | avx2 | 2 | 6.18-b | 0.10 | 0.90 | y |"
    assert md[4] == "| EPYC | avx2 | 2 | not recorded | not measured | not measured | y |"
    assert len(md) == 5 and prov.hosts_table([("z", [{}])]) == []
