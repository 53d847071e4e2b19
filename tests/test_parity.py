"""The parity verdict compares what was asked for, and writes no NaN."""

from analysis import parity


def test_one_backend_and_the_reference_can_pass():
    losses = {"native": [2.3, 1.9, 1.5], "reference": [2.3, 1.9, 1.5]}
    verdict = parity.verdict(losses, steps=50, tolerance=1e-4, backends=["native"])
    assert verdict["verdict"] == "PASS" and verdict["why"] is None
    assert verdict["max_abs_step_loss_difference"] == {"native vs reference": 0.0}
    assert verdict["steps"] == 3


def test_a_missing_run_is_named():
    verdict = parity.verdict({"native": [2.3], "reference": [2.3]}, steps=50, tolerance=1e-4)
    assert verdict["verdict"] == "FAIL" and verdict["why"] == "horovod did not finish"


def test_a_difference_over_the_tolerance_fails():
    losses = {"native": [2.3, 1.9], "horovod": [2.3, 1.8], "reference": [2.3, 1.9]}
    verdict = parity.verdict(losses, steps=50, tolerance=1e-4)
    assert verdict["verdict"] == "FAIL" and "exceeds the tolerance" in verdict["why"]


def test_runs_without_steps_compare_as_none_not_nan():
    verdict = parity.verdict({"native": [], "horovod": [], "reference": []}, steps=50, tolerance=1e-4)
    assert set(verdict["max_abs_step_loss_difference"].values()) == {None} and verdict["verdict"] == "FAIL"


def test_each_backend_is_compared_with_the_reference_that_rounds_as_it_does():
    # With --compression the backends round in a different order; a reference emulating each reproduces it.
    losses = {"native": [2.3, 1.9, 1.5], "horovod": [2.3, 1.9, 1.502],
              "reference": [2.3, 1.9, 1.5], "reference-horovod": [2.3, 1.9, 1.502]}
    verdict = parity.verdict(losses, steps=50, tolerance=1e-4)
    assert set(verdict["max_abs_step_loss_difference"]) == {
        "native vs horovod", "native vs reference", "horovod vs reference-horovod"}
    assert verdict["verdict"] == "PASS" and "rounding order" in verdict["explained"]["native vs horovod"]
    assert verdict["informational"]["reference vs reference-horovod"] > 1e-3


def test_a_backend_that_leaves_its_own_reference_is_not_excused():
    losses = {"native": [2.3, 1.9, 1.5], "horovod": [2.3, 1.9, 1.502],
              "reference": [2.3, 1.9, 1.5], "reference-horovod": [2.3, 1.9, 1.5]}
    verdict = parity.verdict(losses, steps=50, tolerance=1e-4)
    assert verdict["verdict"] == "FAIL" and verdict["explained"] == {}
