"""tools/stress.py's reading of a pass: each JUnit file's passed and failed tests, and the table of failures."""

import importlib.util

from tests.helpers import REPO

_spec = importlib.util.spec_from_file_location("stress", REPO / "tools" / "stress.py")
stress = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stress)

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.test_faults" name="test_a"/>
<testcase classname="tests.test_faults" name="test_b">
  <failure message="AssertionError: two lines">x</failure></testcase>
<testcase classname="tests.test_signals" name="test_c"><error message="fixture broke">y</error></testcase>
<testcase classname="tests.test_signals" name="test_d"><skipped message="no"/></testcase>
</testsuite></testsuites>"""


def test_a_pass_counts_its_failures_and_errors_and_the_table_names_each_with_its_reason(tmp_path):
    (tmp_path / "pass.xml").write_text(JUNIT)
    failures = {}
    assert stress.read(tmp_path / "pass.xml", failures) == (1, 2)
    assert stress.read(tmp_path / "missing.xml", failures) == (0, 1)  # pytest itself died: counted, not lost
    table = stress.table(failures, 5)
    assert "| tests.test_faults::test_b | 1 of 5 | AssertionError: two lines |" in table
    assert "| tests.test_signals::test_c | 1 of 5 | fixture broke |" in table and "pytest did not finish" in table
    assert stress.table({}, 5) == "no test failed in 5 pass(es)"


def test_a_pass_that_ran_no_test_is_a_failure_and_a_file_that_holds_no_tests_is_refused(tmp_path, capsys):
    (tmp_path / "empty.xml").write_text("<testsuites><testsuite/></testsuites>")
    failures = {}
    assert stress.read(tmp_path / "empty.xml", failures) == (0, 1) and "(no test ran)" in failures
    assert stress.main(["--passes", "1", "--tests", "README.md"]) == 2
    assert "not one: README.md" in capsys.readouterr().err
