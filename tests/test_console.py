"""`ddp-vs-horovod COMMAND` (ray_jobs/console.py, the wheel's console script): each command is its module's
`python -m`, and no command or an unknown one is one line and exit 2."""

import sys

import pytest

from contract.config import ConfigError
from ray_jobs import console


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
