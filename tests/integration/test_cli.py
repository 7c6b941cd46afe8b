"""Bad command lines get a clear message and a documented exit code, and create no sandbox."""

import pytest

RUNS_TOKEN = "print('TOKEN-' + 'should-not-run')"
USAGE = 64
NO_INPUT = 66


@pytest.mark.parametrize(
    "argv, mentions",
    [
        (["run", "--bogus-flag", "-c", RUNS_TOKEN], "--bogus-flag"),
        (["run", "--lang", "cobol", "-c", RUNS_TOKEN], "cobol"),
        (["run", "--memory", "12Q", "-c", RUNS_TOKEN], "12Q"),
        (["run", "--disk", "-5M", "-c", RUNS_TOKEN], "-5M"),
        (["run", "--output", "lots", "-c", RUNS_TOKEN], "lots"),
        (["run", "--timeout", "5x", "-c", RUNS_TOKEN], "5x"),
        (["run", "--cpu-time", "forever", "-c", RUNS_TOKEN], "forever"),
        (["run", "--pids", "many", "-c", RUNS_TOKEN], "many"),
        (["run", "--open-files", "1.5", "-c", RUNS_TOKEN], "1.5"),
        (["run", "--cpus", "half", "-c", RUNS_TOKEN], "half"),
        (["run", "--memory"], "--memory"),
        (["run"], ""),
        (["frobnicate"], "frobnicate"),
    ],
)
def test_usage_errors(cli, host, argv, mentions):
    p = cli(*argv)
    stderr = p.stderr.decode(errors="replace")
    assert p.returncode == USAGE, (p.returncode, stderr)
    assert stderr.strip(), "no message on stderr"
    assert mentions in stderr, stderr
    assert b"TOKEN-should-not-run" not in p.stdout
    assert host.leftover_cgroups() == []


def test_usage_errors_with_json_run_nothing(cli):
    p = cli("run", "--json", "--memory", "12Q", "-c", RUNS_TOKEN)
    assert p.returncode == USAGE
    assert b"TOKEN-should-not-run" not in p.stdout


def test_missing_program_file(cli, tmp_path):
    missing = tmp_path / "no-such-program.py"
    p = cli("run", str(missing))
    stderr = p.stderr.decode(errors="replace")
    assert p.returncode == NO_INPUT, (p.returncode, stderr)
    assert str(missing) in stderr, stderr


def test_missing_stdin_file(cli, tmp_path):
    missing = tmp_path / "no-such-input"
    p = cli("run", "--stdin", str(missing), "-c", RUNS_TOKEN)
    stderr = p.stderr.decode(errors="replace")
    assert p.returncode == NO_INPUT, (p.returncode, stderr)
    assert str(missing) in stderr, stderr
    assert b"TOKEN-should-not-run" not in p.stdout


def test_unreadable_program_is_a_directory(cli, tmp_path):
    p = cli("run", str(tmp_path))
    assert p.returncode == NO_INPUT, p.stderr
    assert str(tmp_path) in p.stderr.decode(errors="replace")


def test_help(cli):
    p = cli("run", "--help")
    assert p.returncode == 0
    text = (p.stdout + p.stderr).decode()
    for flag in ("--lang", "--memory", "--pids", "--cpu-time", "--cpus", "--timeout", "--disk",
                 "--output", "--open-files", "--stdin", "--json"):
        assert flag in text, flag


def test_version(cli):
    p = cli("version")
    assert p.returncode == 0
    assert p.stdout.strip(), "version printed nothing"
