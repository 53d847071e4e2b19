"""`ddp-vs-horovod COMMAND` (ray_jobs/console.py, the wheel's console script): each command is its module's
`python -m`, its usage named as typed; --help and --version answer, exit 0; no command or an unknown one is one line
and exit 2."""

import sys

import pytest

from contract.config import ConfigError
from ray_jobs import console
from runtime import cli


@pytest.fixture(autouse=True)
def _prog(monkeypatch):
    monkeypatch.setattr(cli, "prog", "")  # the console sets it for the rest of its process: not for other tests


def test_each_command_runs_its_module_with_the_flags_after_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ddp-vs-horovod", "replicate", "--help"])
    with pytest.raises(SystemExit) as done:
        console.main()
    assert done.value.code == 0 and "two or more folders written by python -m ray_jobs.compare" in capsys.readouterr().out


@pytest.mark.parametrize("argv, said", [([], "none was given"), (["comparee"], "'comparee' is not one")])
def test_no_command_or_an_unknown_one_names_the_commands(argv, said):
    with pytest.raises(ConfigError) as refused:
        console.command(argv)
    assert said in str(refused.value) and "compare, train, gpu-check, predict" in str(refused.value)


@pytest.mark.parametrize("argv, said", [(["--help"], "usage: ddp-vs-horovod COMMAND [flags]"), (["-h"], "commands: "
                                         "compare (python -m ray_jobs.compare), train (python -m ray_jobs.train)"),
                                        (["--version"], "ddp-vs-horovod 0.1.0")])
def test_help_and_version_answer_with_exit_0(argv, said, monkeypatch, capsys):
    """Seen: both exited 2, as an unknown command."""
    monkeypatch.setattr(sys, "argv", ["ddp-vs-horovod", *argv])
    console.main()  # returns: the console script exits 0
    assert said in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # this test process imported it earlier
@pytest.mark.parametrize("command", ["train", "predict", "add-references"])
def test_a_command_s_usage_names_the_command_as_typed(command, monkeypatch, capsys):
    """Seen: `ddp-vs-horovod train --help` said `usage: python -m ray_jobs.train`."""
    monkeypatch.setattr(sys, "argv", ["ddp-vs-horovod", command, "--help"])
    with pytest.raises(SystemExit) as done:
        console.main()
    assert done.value.code == 0 and capsys.readouterr().out.startswith(f"usage: ddp-vs-horovod {command} ")
